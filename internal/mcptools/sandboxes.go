package mcptools

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
	"github.com/corral-sandbox/corral/client"
	"github.com/corral-sandbox/corral/internal/capped"
)

// What one exec returns and waits for, unless the call asks for less.
const (
	defaultOutputBytes = 64 << 10
	maxOutputBytes     = 1 << 20
	defaultExecTimeout = 60 * time.Second
	maxExecTimeout     = time.Hour
)

type createIn struct {
	Name    string            `json:"name" jsonschema:"the sandbox's name: a DNS label (lower-case letters, digits, '-'), unique on the gateway"`
	Image   string            `json:"image,omitempty" jsonschema:"image to run (default: the gateway's default image)"`
	Command []string          `json:"command,omitempty" jsonschema:"main command, as argv; default: keep the sandbox running (sleep) so that commands can be run in it"`
	Policy  string            `json:"policy,omitempty" jsonschema:"the sandbox's policy as YAML text (filesystem_policy, network_policies, process, limits, isolation); default: no network, the default limits"`
	Labels  map[string]string `json:"labels,omitempty" jsonschema:"labels to put on the sandbox"`
	Pool    string            `json:"pool,omitempty" jsonschema:"claim a ready sandbox of this warm pool at once (then image, command and policy are the pool's)"`
	// FromSnapshot makes the sandbox from a snapshot.
	FromSnapshot string `json:"from_snapshot,omitempty" jsonschema:"make the sandbox from this snapshot: /sandbox holds its files, and it runs its image, command and policy unless given here"`
}

type snapshotIn struct {
	Name     string `json:"name" jsonschema:"the sandbox's name or id"`
	Snapshot string `json:"snapshot" jsonschema:"the new snapshot's name: a DNS label"`
}

type snapshotOut struct {
	Name    string `json:"name"`
	Sandbox string `json:"sandbox,omitempty" jsonschema:"the sandbox it was taken of"`
	Files   int64  `json:"files" jsonschema:"its entries: files, directories, links"`
	Bytes   int64  `json:"bytes" jsonschema:"what its files hold"`
}

type snapshotsOut struct {
	Snapshots []snapshotOut `json:"snapshots"`
}

type snapshotNameIn struct {
	Snapshot string `json:"snapshot" jsonschema:"the snapshot's name or id"`
}

type forkIn struct {
	Name       string `json:"name" jsonschema:"the sandbox's name or id"`
	Count      int    `json:"count" jsonschema:"how many sandboxes to make from its snapshot, at least 1"`
	NamePrefix string `json:"name_prefix,omitempty" jsonschema:"name them PREFIX-1 … PREFIX-N (default: the sandbox's name and -fork)"`
}

type listIn struct {
	Labels map[string]string `json:"labels,omitempty" jsonschema:"only sandboxes with every one of these labels"`
	Phase  string            `json:"phase,omitempty" jsonschema:"only sandboxes in this phase"`
}

type listOut struct {
	Sandboxes []summary `json:"sandboxes"`
}

type nameIn struct {
	Name string `json:"name" jsonschema:"the sandbox's name or id"`
}

type getOut struct {
	summary
	Policy      string `json:"policy,omitempty"`
	Protections string `json:"protections,omitempty" jsonschema:"what of the policy protects the running main process"`
	Network     string `json:"network,omitempty" jsonschema:"the egress rules in force"`
}

type execIn struct {
	Name           string            `json:"name" jsonschema:"the sandbox's name or id; it must be ready"`
	Command        []string          `json:"command,omitempty" jsonschema:"the command as argv, run without a shell; give this or shell"`
	Shell          string            `json:"shell,omitempty" jsonschema:"the command as a shell string, run with sh -c; give this or command"`
	Stdin          string            `json:"stdin,omitempty" jsonschema:"text given to the command's standard input"`
	Cwd            string            `json:"cwd,omitempty" jsonschema:"directory to run in (default: the sandbox's workdir, /sandbox)"`
	Env            map[string]string `json:"env,omitempty" jsonschema:"environment variables to set for the command"`
	TimeoutSeconds int               `json:"timeout_seconds,omitempty" jsonschema:"give up after this many seconds, killing the command (default 60, at most 3600)"`
	MaxOutputBytes int               `json:"max_output_bytes,omitempty" jsonschema:"keep at most this many bytes of stdout and of stderr each (default 65536, at most 1048576)"`
}

type execOut struct {
	Stdout    string `json:"stdout"`
	Stderr    string `json:"stderr"`
	ExitCode  int    `json:"exit_code" jsonschema:"the command's exit status; 127: no such program; -1: it timed out"`
	Truncated bool   `json:"truncated" jsonschema:"true when stdout or stderr was cut at max_output_bytes"`
	TimedOut  bool   `json:"timed_out" jsonschema:"true when the command ran past timeout_seconds and was killed"`
}

type logsIn struct {
	Name           string `json:"name" jsonschema:"the sandbox's name or id"`
	Tail           int    `json:"tail,omitempty" jsonschema:"only the last this many lines (default: all)"`
	MaxOutputBytes int    `json:"max_output_bytes,omitempty" jsonschema:"keep at most this many bytes of each stream (default 65536, at most 1048576)"`
}

type logsOut struct {
	Stdout    string `json:"stdout"`
	Stderr    string `json:"stderr"`
	Truncated bool   `json:"truncated"`
}

type exposeIn struct {
	Name    string `json:"name" jsonschema:"the sandbox's name or id"`
	Port    int    `json:"port" jsonschema:"the port the sandbox listens on, on its own loopback"`
	Address string `json:"address,omitempty" jsonschema:"HOST:PORT of the gateway's host to serve it at (default 127.0.0.1 and a free port)"`
}

type exposeOut struct {
	Address string `json:"address" jsonschema:"where the port is served on the gateway's host"`
}

func (t *Tools) addSandboxTools(s *mcp.Server) {
	mcp.AddTool(s, &mcp.Tool{Name: "sandbox_create", Description: "Create a sandbox and wait until it runs (or claim one from a warm pool). " +
		"Without a command it keeps running, ready for sandbox_exec. Returns the sandbox."}, t.create)
	mcp.AddTool(s, &mcp.Tool{Name: "sandbox_list", Description: "List the gateway's sandboxes, oldest first, with their phase."}, t.list)
	mcp.AddTool(s, &mcp.Tool{Name: "sandbox_get", Description: "Show one sandbox: its phase, why, its spec and policy, and what protects it."}, t.get)
	mcp.AddTool(s, &mcp.Tool{Name: "sandbox_exec", Description: "Run a command in a ready sandbox and return its stdout, stderr and exit code. " +
		"Give command (argv) or shell (a string for sh -c). Output past max_output_bytes is cut, and truncated says so."}, t.exec)
	mcp.AddTool(s, &mcp.Tool{Name: "sandbox_stop", Description: "Stop a sandbox (its files in /sandbox stay) and wait until it is stopped."},
		t.intent(func(ctx context.Context, name string) (*client.Sandbox, error) { return t.c.Stop(ctx, name, false) }))
	mcp.AddTool(s, &mcp.Tool{Name: "sandbox_start", Description: "Start a stopped sandbox again and wait until it runs."},
		t.intent(func(ctx context.Context, name string) (*client.Sandbox, error) { return t.c.Start(ctx, name, false) }))
	mcp.AddTool(s, &mcp.Tool{Name: "sandbox_pause", Description: "Freeze every process of a running sandbox, its memory kept and no CPU used, " +
		"and wait until it is paused. An exec or a file operation on it is refused until it is resumed, unless its policy says lifecycle.auto_resume. " +
		"With memory, its processes and memory are checkpointed out to the gateway's disk and the memory freed instead (the gVisor tier with lifecycle.memory_snapshots)."},
		t.pause)
	mcp.AddTool(s, &mcp.Tool{Name: "sandbox_resume", Description: "Thaw a paused sandbox (the same processes go on) and wait until it runs."},
		t.intent(func(ctx context.Context, name string) (*client.Sandbox, error) { return t.c.Resume(ctx, name, false) }))
	mcp.AddTool(s, &mcp.Tool{Name: "sandbox_delete", Description: "Delete a sandbox, in any phase, and wait until it is gone."},
		t.intent(func(ctx context.Context, name string) (*client.Sandbox, error) {
			sb, err := t.c.Delete(ctx, name, client.DeleteOptions{})
			if sb != nil {
				sb.Phase, sb.Reason = "deleted", ""
			}
			return sb, err
		}))
	mcp.AddTool(s, &mcp.Tool{Name: "sandbox_logs", Description: "Return what a sandbox's main process printed."}, t.logs)
	mcp.AddTool(s, &mcp.Tool{Name: "sandbox_snapshot", Description: "Take a snapshot of a sandbox's /sandbox (the sandbox is paused for the instant of the copy), " +
		"to come back to with sandbox_create from_snapshot, or to try several paths from with sandbox_fork."}, t.snapshot)
	mcp.AddTool(s, &mcp.Tool{Name: "sandbox_fork", Description: "Make count sandboxes from a snapshot of one, at once, each with its own copy of /sandbox, " +
		"and wait until they run. Returns them."}, t.fork)
	mcp.AddTool(s, &mcp.Tool{Name: "snapshot_list", Description: "List the snapshots, oldest first."}, t.snapshots)
	mcp.AddTool(s, &mcp.Tool{Name: "snapshot_delete", Description: "Delete a snapshot; sandboxes made from it keep their files."}, t.deleteSnapshot)
	mcp.AddTool(s, &mcp.Tool{Name: "port_expose", Description: "Serve a port of a sandbox's loopback on the gateway's host, and return the address. " +
		"Connections reach the sandbox only while it runs."}, t.expose)
}

func (t *Tools) create(ctx context.Context, _ *mcp.CallToolRequest, in createIn) (*mcp.CallToolResult, summary, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.room(ctx, 1); err != nil {
		return nil, summary{}, err
	}
	labels := maps.Clone(in.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[SessionLabel] = t.opts.Session
	spec := &client.Spec{Image: in.Image, Command: in.Command, Policy: in.Policy, Labels: labels}
	if in.Pool != "" {
		spec = &client.Spec{Labels: labels}
	} else if len(spec.Command) == 0 && in.FromSnapshot == "" {
		spec.Command = []string{"sleep", "infinity"}
	}
	created, err := t.c.Create(ctx, in.Name, spec, client.CreateOptions{Pool: in.Pool, FromSnapshot: in.FromSnapshot})
	if err != nil {
		return nil, summary{}, toolError(err)
	}
	return nil, summarize(created.Sandbox), nil
}

// room refuses what would take this session past the sandboxes it may
// hold; t.mu is held.
func (t *Tools) room(ctx context.Context, more int) error {
	held, err := t.Created(ctx)
	if err != nil {
		return toolError(err)
	}
	if len(held)+more > t.opts.MaxSandboxes {
		names := make([]string, len(held))
		for i, sb := range held {
			names[i] = sb.Name
		}
		return fmt.Errorf("this MCP session holds %d sandboxes (%s), and at most %d (--max-sandboxes %d): %d more would pass it; delete some first",
			len(held), strings.Join(names, ", "), t.opts.MaxSandboxes, t.opts.MaxSandboxes, more)
	}
	return nil
}

func snapshotOf(s *client.Snapshot) snapshotOut {
	return snapshotOut{Name: s.Name, Sandbox: s.Sandbox, Files: s.Files, Bytes: s.Bytes}
}

func (t *Tools) snapshot(ctx context.Context, _ *mcp.CallToolRequest, in snapshotIn) (*mcp.CallToolResult, snapshotOut, error) {
	snap, err := t.c.Snapshot(ctx, in.Name, in.Snapshot, false)
	if err != nil {
		return nil, snapshotOut{}, toolError(err)
	}
	return nil, snapshotOf(snap), nil
}

func (t *Tools) snapshots(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, snapshotsOut, error) {
	list, err := t.c.ListSnapshots(ctx)
	if err != nil {
		return nil, snapshotsOut{}, toolError(err)
	}
	out := snapshotsOut{Snapshots: make([]snapshotOut, len(list))}
	for i, s := range list {
		out.Snapshots[i] = snapshotOf(s)
	}
	return nil, out, nil
}

func (t *Tools) deleteSnapshot(ctx context.Context, _ *mcp.CallToolRequest, in snapshotNameIn) (*mcp.CallToolResult, snapshotOut, error) {
	snap, err := t.c.DeleteSnapshot(ctx, in.Snapshot)
	if err != nil {
		return nil, snapshotOut{}, toolError(err)
	}
	return nil, snapshotOf(snap), nil
}

func (t *Tools) fork(ctx context.Context, _ *mcp.CallToolRequest, in forkIn) (*mcp.CallToolResult, listOut, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.room(ctx, max(in.Count, 1)); err != nil {
		return nil, listOut{}, err
	}
	src, err := t.c.Get(ctx, in.Name)
	if err != nil {
		return nil, listOut{}, toolError(err)
	}
	labels := maps.Clone(src.GetSpec().GetLabels())
	if labels == nil {
		labels = map[string]string{}
	}
	labels[SessionLabel] = t.opts.Session // the forks are this session's
	forks, err := t.c.Fork(ctx, in.Name, in.Count, client.ForkOptions{NamePrefix: in.NamePrefix, Labels: labels})
	out := listOut{Sandboxes: make([]summary, 0, len(forks))}
	for _, sb := range forks {
		if sb != nil {
			out.Sandboxes = append(out.Sandboxes, summarize(sb))
		}
	}
	return nil, out, toolError(err)
}

func (t *Tools) list(ctx context.Context, _ *mcp.CallToolRequest, in listIn) (*mcp.CallToolResult, listOut, error) {
	list, _, err := t.c.List(ctx, client.ListOptions{Labels: in.Labels, Phase: in.Phase})
	if err != nil {
		return nil, listOut{}, toolError(err)
	}
	out := listOut{Sandboxes: make([]summary, len(list))}
	for i, sb := range list {
		out.Sandboxes[i] = summarize(sb)
	}
	return nil, out, nil
}

func (t *Tools) get(ctx context.Context, _ *mcp.CallToolRequest, in nameIn) (*mcp.CallToolResult, getOut, error) {
	sb, err := t.c.Get(ctx, in.Name)
	if err != nil {
		return nil, getOut{}, toolError(err)
	}
	return nil, getOut{summary: summarize(sb), Policy: sb.GetSpec().GetPolicy(), Protections: sb.Protections, Network: sb.Network}, nil
}

// intent is the tool that asks a sandbox for goal and waits until it is
// there.
// intent is a tool that asks for an intent change and waits for it (do).
func (t *Tools) intent(do func(ctx context.Context, name string) (*client.Sandbox, error)) mcp.ToolHandlerFor[nameIn, summary] {
	return func(ctx context.Context, _ *mcp.CallToolRequest, in nameIn) (*mcp.CallToolResult, summary, error) {
		sb, err := do(ctx, in.Name)
		return nil, summarize(sb), toolError(err)
	}
}

// pauseIn names the sandbox to pause and how.
type pauseIn struct {
	Name   string `json:"name" jsonschema:"the sandbox's name or id"`
	Memory bool   `json:"memory,omitempty" jsonschema:"checkpoint the processes and memory out and free the memory, rather than freeze them in place"`
}

func (t *Tools) pause(ctx context.Context, _ *mcp.CallToolRequest, in pauseIn) (*mcp.CallToolResult, summary, error) {
	pause := t.c.Pause
	if in.Memory {
		pause = t.c.PauseMemory
	}
	sb, err := pause(ctx, in.Name, false)
	return nil, summarize(sb), toolError(err)
}

func (t *Tools) exec(ctx context.Context, _ *mcp.CallToolRequest, in execIn) (*mcp.CallToolResult, execOut, error) {
	argv, err := commandLine(in)
	if err != nil {
		return nil, execOut{}, err
	}
	timeout := bounded(time.Duration(in.TimeoutSeconds)*time.Second, defaultExecTimeout, maxExecTimeout)
	limit := bounded(in.MaxOutputBytes, defaultOutputBytes, maxOutputBytes)
	stdout, stderr := capped.New(limit), capped.New(limit)
	opts := client.ExecOptions{Stdout: stdout, Stderr: stderr}
	if in.Stdin != "" {
		opts.Stdin = strings.NewReader(in.Stdin)
	}
	deadline := time.Now().Add(timeout)
	ectx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	code, err := t.c.Exec(ectx, in.Name, argv, opts)
	out := execOut{Stdout: stdout.String(), Stderr: stderr.String(), ExitCode: code, Truncated: stdout.Cut || stderr.Cut}
	// Past the deadline, the gateway may have ended the stream (its copy of
	// the deadline) before this side's timer has fired: a timeout too.
	if err != nil && ctx.Err() == nil && (ectx.Err() != nil || !time.Now().Before(deadline)) {
		out.TimedOut, out.ExitCode = true, -1
		return nil, out, nil
	}
	return nil, out, toolError(err)
}

// commandLine is the argv an exec runs: command, or shell through sh -c;
// in cwd and with env when given (through sh and env inside).
func commandLine(in execIn) ([]string, error) {
	var argv []string
	switch {
	case len(in.Command) > 0 && in.Shell != "":
		return nil, errors.New("give command (argv) or shell (a string), not both")
	case len(in.Command) > 0:
		argv = in.Command
	case in.Shell != "":
		argv = []string{"sh", "-c", in.Shell}
	default:
		return nil, errors.New("no command: give command (argv) or shell (a string for sh -c)")
	}
	if len(in.Env) > 0 {
		env := []string{"env"}
		for k, v := range in.Env {
			if k == "" || strings.ContainsAny(k, "=\x00") {
				return nil, fmt.Errorf("env: %q is no variable name", k)
			}
			env = append(env, k+"="+v)
		}
		argv = append(env, argv...)
	}
	if in.Cwd != "" {
		argv = append([]string{"sh", "-c", `cd "$0" && exec "$@"`, in.Cwd}, argv...)
	}
	return argv, nil
}

func (t *Tools) logs(ctx context.Context, _ *mcp.CallToolRequest, in logsIn) (*mcp.CallToolResult, logsOut, error) {
	limit := bounded(in.MaxOutputBytes, defaultOutputBytes, maxOutputBytes)
	stdout, stderr := capped.New(limit), capped.New(limit)
	err := t.c.Logs(ctx, in.Name, client.LogOptions{Tail: in.Tail}, stdout, stderr)
	return nil, logsOut{Stdout: stdout.String(), Stderr: stderr.String(), Truncated: stdout.Cut || stderr.Cut}, toolError(err)
}

func (t *Tools) expose(ctx context.Context, _ *mcp.CallToolRequest, in exposeIn) (*mcp.CallToolResult, exposeOut, error) {
	p, err := t.c.ExposePort(ctx, &corralv1.ExposePortRequest{Name: in.Name, Port: int32(in.Port), Address: in.Address})
	if err != nil {
		return nil, exposeOut{}, toolError(t.c.Explain(err))
	}
	return nil, exposeOut{Address: p.Address}, nil
}

// bounded is v, or def when v is not above 0, and at most most.
func bounded[T int | time.Duration](v, def, most T) T {
	if v <= 0 {
		return def
	}
	return min(v, most)
}
