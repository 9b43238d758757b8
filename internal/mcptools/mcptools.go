// Package mcptools is corral's tool set for the Model Context Protocol:
// sandboxes, commands, files and ports as tools a model can call, each
// with a JSON schema and a description it can act on. It is a client of
// the API, on the public client package, for both MCP front ends: `corral
// mcp` (stdio, a client of a gateway as the CLI is) and the gateway's own
// /mcp (streamable HTTP, over an in-process connection that carries the
// HTTP caller). Errors are tool errors carrying the gateway's one-line
// reason.
package mcptools

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
	"github.com/corral-sandbox/corral/client"
	"github.com/corral-sandbox/corral/internal/buildid"
)

// SessionLabel is the label every sandbox an MCP session creates carries;
// its value names the session.
const SessionLabel = "mcp.session"

// DefaultMaxSandboxes is how many sandboxes one session may hold unless
// told otherwise.
const DefaultMaxSandboxes = 5

// Options tune a tool set.
type Options struct {
	// Session names the session: the value of SessionLabel on the
	// sandboxes it creates.
	Session string
	// MaxSandboxes bounds the sandboxes the session holds at once
	// (0: DefaultMaxSandboxes).
	MaxSandboxes int
}

// Tools are the tools of one MCP session on one gateway connection.
type Tools struct {
	c    *client.Client
	opts Options
	mu   sync.Mutex // one create at a time: the count, then the create
}

// NewServer is an MCP server whose tools act on the gateway c reaches.
func NewServer(c *client.Client, opts Options) *mcp.Server {
	if opts.MaxSandboxes <= 0 {
		opts.MaxSandboxes = DefaultMaxSandboxes
	}
	t := &Tools{c: c, opts: opts}
	s := mcp.NewServer(&mcp.Implementation{Name: "corral", Title: "corral sandboxes", Version: cmp.Or(buildid.Identity(), "dev")}, &mcp.ServerOptions{
		Instructions: "Tools to run untrusted code in isolated sandboxes of a corral gateway: create a sandbox, run commands in it, " +
			"read and write its files, expose a port, and delete it when done. A sandbox persists until deleted; this session may hold " +
			fmt.Sprintf("at most %d at once.", opts.MaxSandboxes),
	})
	t.addSandboxTools(s)
	t.addFileTools(s)
	return s
}

// Created lists the sandboxes this session holds (SessionLabel).
func (t *Tools) Created(ctx context.Context) ([]*client.Sandbox, error) {
	list, _, err := t.c.List(ctx, client.ListOptions{Labels: map[string]string{SessionLabel: t.opts.Session}})
	return list, err
}

// DeleteCreated deletes every sandbox the session holds, waiting for each,
// and returns how many it deleted.
func DeleteCreated(ctx context.Context, c *client.Client, session string) (int, error) {
	list, _, err := c.List(ctx, client.ListOptions{Labels: map[string]string{SessionLabel: session}})
	if err != nil {
		return 0, err
	}
	var errs []error
	for _, sb := range list {
		if _, err := c.Delete(ctx, sb.Id, client.DeleteOptions{Force: true}); err != nil {
			errs = append(errs, fmt.Errorf("sandbox %q: %s", sb.Name, client.Message(err)))
		}
	}
	return len(list) - len(errs), errors.Join(errs...)
}

// toolError is err as a model reads it: the gateway's one-line reason.
func toolError(err error) error {
	if err == nil {
		return nil
	}
	return errors.New(client.Message(err))
}

// summary is a sandbox as the tools return it.
type summary struct {
	Name     string            `json:"name"`
	ID       string            `json:"id"`
	Phase    string            `json:"phase" jsonschema:"provisioning, ready, stopping, stopped, starting, deleting, exited or error"`
	Desired  string            `json:"desired_state"`
	Image    string            `json:"image,omitempty"`
	Command  []string          `json:"command,omitempty"`
	Labels   map[string]string `json:"labels,omitempty"`
	Reason   string            `json:"reason,omitempty" jsonschema:"why the sandbox is in its phase, when there is something to say"`
	ExitCode *int32            `json:"exit_code,omitempty" jsonschema:"the main process's exit status, once it exited"`
}

func summarize(sb *corralv1.Sandbox) summary {
	if sb == nil {
		return summary{}
	}
	return summary{Name: sb.Name, ID: sb.Id, Phase: sb.Phase, Desired: sb.DesiredState, Image: sb.GetSpec().GetImage(),
		Command: sb.GetSpec().GetCommand(), Labels: sb.GetSpec().GetLabels(), Reason: sb.Reason, ExitCode: sb.ExitCode}
}
