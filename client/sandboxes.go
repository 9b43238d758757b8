package client

import (
	"context"
	"errors"
	"fmt"
	"io"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
)

// Sandbox is a sandbox's record as the gateway returns it.
type Sandbox = corralv1.Sandbox

// Spec is what a sandbox runs: image, command, policy, labels, restart
// policy.
type Spec = corralv1.SandboxSpec

// Goal is what Wait waits for.
type Goal string

// The goals of Wait.
const (
	// Running: ready, or already exited for good (a short command may end
	// before the wait sees it run). What Create and Start wait for.
	Running Goal = "running"
	// Stopped: what Stop waits for.
	Stopped Goal = "stopped"
	// Deleted: the record is gone. What Delete waits for.
	Deleted Goal = "deleted"
	// Paused: every process frozen. What Pause waits for.
	Paused Goal = "paused"
)

// CreateOptions tune Create.
type CreateOptions struct {
	// Pool, when set, claims a ready sandbox of that warm pool; the spec
	// may then carry only labels.
	Pool string
	// FromSnapshot, when set, makes the sandbox from that snapshot: its
	// files, and its image, command, labels and policy except where the
	// spec sets them.
	FromSnapshot string
	// RequestID makes the create retryable: a second create with the same
	// id returns the sandbox the first one made.
	RequestID string
	// Detach returns once the sandbox is recorded, without waiting until
	// it runs.
	Detach bool
	// Progress, when set, is called at each change of the sandbox's phase
	// or reason while Create waits.
	Progress func(*Sandbox)
}

// Created is what Create did.
type Created struct {
	Sandbox *Sandbox
	// New is false when RequestID matched an earlier create.
	New bool
	// FromPool is true when a ready pool member was claimed; PoolReason
	// says why a create with a pool was not served from it.
	FromPool   bool
	PoolReason string
}

// Create creates sandbox name and, unless opts.Detach, waits until it
// runs (Running), returning its record then. A sandbox that reaches the
// error phase instead fails it, with the reason.
func (c *Client) Create(ctx context.Context, name string, spec *Spec, opts CreateOptions) (*Created, error) {
	resp, err := c.CreateSandbox(ctx, &corralv1.CreateSandboxRequest{Name: name, Spec: spec, RequestId: opts.RequestID, Pool: opts.Pool,
		FromSnapshot: opts.FromSnapshot})
	if err != nil {
		return nil, c.Explain(err)
	}
	out := &Created{Sandbox: resp.Sandbox, New: resp.Created, FromPool: resp.FromPool, PoolReason: resp.PoolReason}
	if opts.Detach {
		return out, nil
	}
	sb, err := c.Wait(ctx, resp.Sandbox, Running, opts.Progress)
	if err != nil {
		return out, err
	}
	out.Sandbox = sb
	return out, nil
}

// Get returns a sandbox by name or id, with what protects it and its
// network rules.
func (c *Client) Get(ctx context.Context, name string) (*Sandbox, error) {
	sb, err := c.GetSandbox(ctx, &corralv1.GetSandboxRequest{Name: name})
	return sb, c.Explain(err)
}

// ListOptions select and page List.
type ListOptions struct {
	// Labels and Phase select: every label given, and the phase when set.
	Labels map[string]string
	Phase  string
	// Limit, when above 0, returns at most that many, and PageToken
	// continues a listing where the last page's NextPageToken says.
	Limit     int
	PageToken string
}

// List returns the sandboxes opts select, oldest first: every page, or
// opts.Limit of them and the token of the next page ("" when there is
// none).
func (c *Client) List(ctx context.Context, opts ListOptions) ([]*Sandbox, string, error) {
	req := &corralv1.ListSandboxesRequest{Labels: opts.Labels, Phase: opts.Phase, Limit: int32(opts.Limit), PageToken: opts.PageToken}
	var all []*Sandbox
	for {
		resp, err := c.ListSandboxes(ctx, req)
		if err != nil {
			return nil, "", c.Explain(err)
		}
		all = append(all, resp.Sandboxes...)
		if resp.NextPageToken == "" {
			return all, "", nil
		}
		if opts.Limit > 0 {
			if len(all) >= opts.Limit {
				return all, resp.NextPageToken, nil
			}
			req.Limit = int32(opts.Limit - len(all))
		}
		req.PageToken = resp.NextPageToken
	}
}

// Stop asks a sandbox to stop and, unless detach, waits until it is
// stopped.
func (c *Client) Stop(ctx context.Context, name string, detach bool) (*Sandbox, error) {
	sb, err := c.StopSandbox(ctx, &corralv1.StopSandboxRequest{Name: name})
	if err != nil || detach {
		return sb, c.Explain(err)
	}
	return c.Wait(ctx, sb, Stopped, nil)
}

// Start asks a stopped sandbox to start and, unless detach, waits until it
// runs.
func (c *Client) Start(ctx context.Context, name string, detach bool) (*Sandbox, error) {
	sb, err := c.StartSandbox(ctx, &corralv1.StartSandboxRequest{Name: name})
	if err != nil || detach {
		return sb, c.Explain(err)
	}
	return c.Wait(ctx, sb, Running, nil)
}

// Pause asks a running sandbox to freeze every process, its memory kept,
// and, unless detach, waits until it is paused.
func (c *Client) Pause(ctx context.Context, name string, detach bool) (*Sandbox, error) {
	return c.pause(ctx, &corralv1.PauseSandboxRequest{Name: name}, detach)
}

// PauseMemory asks a running sandbox on native's gVisor tier (with
// lifecycle.memory_snapshots) to be checkpointed out, processes and
// memory, and its memory freed; Resume restores it. Unless detach, it
// waits until the sandbox is paused.
func (c *Client) PauseMemory(ctx context.Context, name string, detach bool) (*Sandbox, error) {
	return c.pause(ctx, &corralv1.PauseSandboxRequest{Name: name, Memory: true}, detach)
}

func (c *Client) pause(ctx context.Context, req *corralv1.PauseSandboxRequest, detach bool) (*Sandbox, error) {
	sb, err := c.PauseSandbox(ctx, req)
	if err != nil || detach {
		return sb, c.Explain(err)
	}
	return c.Wait(ctx, sb, Paused, nil)
}

// Resume thaws a paused sandbox (the same incarnation) and, unless
// detach, waits until it runs.
func (c *Client) Resume(ctx context.Context, name string, detach bool) (*Sandbox, error) {
	sb, err := c.ResumeSandbox(ctx, &corralv1.ResumeSandboxRequest{Name: name})
	if err != nil || detach {
		return sb, c.Explain(err)
	}
	return c.Wait(ctx, sb, Running, nil)
}

// DeleteOptions tune Delete.
type DeleteOptions struct {
	// Force skips the graceful stop and cancels any driver call in flight.
	Force bool
	// AssumeGone (with Force and Reason) removes the record without the
	// driver's confirmation that the compute is gone; it is journaled with
	// who asked and why.
	AssumeGone bool
	Reason     string
	// Detach returns once the delete is recorded, without waiting until
	// the sandbox is gone.
	Detach bool
}

// Delete deletes a sandbox in any phase and, unless opts.Detach, waits
// until it is gone. It returns the record as the request left it.
func (c *Client) Delete(ctx context.Context, name string, opts DeleteOptions) (*Sandbox, error) {
	resp, err := c.DeleteSandbox(ctx, &corralv1.DeleteSandboxRequest{Name: name, Force: opts.Force, AssumeGone: opts.AssumeGone, Reason: opts.Reason})
	if err != nil {
		return nil, c.Explain(err)
	}
	if opts.Detach || opts.AssumeGone {
		return resp.Sandbox, nil
	}
	_, err = c.Wait(ctx, resp.Sandbox, Deleted, nil)
	return resp.Sandbox, err
}

// Wait follows sb (the record a request returned) until it reaches goal,
// calling progress, when set, at each change of its phase or reason. It
// returns the record that reached the goal (nil for Deleted). The gateway
// decides (WaitSandbox): an error phase written after the request fails
// the wait with its reason (FailedPrecondition), as does the sandbox's
// deletion while waiting for another goal (NotFound). When ctx ends first
// the request stands, and the error says so.
func (c *Client) Wait(ctx context.Context, sb *Sandbox, goal Goal, progress func(*Sandbox)) (*Sandbox, error) {
	stream, err := c.WaitSandbox(ctx, &corralv1.WaitSandboxRequest{Name: sb.Id, Goal: string(goal), SinceRevision: sb.Revision})
	if err != nil {
		return nil, c.lostWait(ctx, sb, err)
	}
	for {
		ev, err := stream.Recv()
		if err != nil {
			if err == io.EOF {
				err = errors.New("the gateway ended the wait without an answer")
			}
			return nil, c.lostWait(ctx, sb, err)
		}
		switch ev.Type {
		case "REACHED":
			return ev.Sandbox, nil
		case "PROGRESS":
			if progress != nil && ev.Sandbox != nil {
				progress(ev.Sandbox)
			}
		}
	}
}

// lostWait is a wait's error: the gateway's answer as it is, or, for a
// wait cut short, that the request stands.
func (c *Client) lostWait(ctx context.Context, sb *Sandbox, err error) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return &waitCut{fmt.Errorf("timed out waiting for sandbox %q; the gateway keeps working on it (see corral sandbox get %s)", sb.Name, sb.Name), err}
	}
	err = c.Explain(err)
	if isAnswer(err) {
		return err
	}
	return &waitCut{fmt.Errorf("stopped waiting for sandbox %q: %s; the request stands (see corral sandbox get %s)", sb.Name, Message(err), sb.Name), err}
}

// waitCut is a wait that ended before its answer; the cause stays
// reachable through it.
type waitCut struct{ msg, cause error }

func (e *waitCut) Error() string { return e.msg.Error() }
func (e *waitCut) Unwrap() error { return e.cause }

// isAnswer is whether err is the gateway's answer to a request (a refusal,
// a failure it names), not a call cut short.
func isAnswer(err error) bool {
	switch status.Code(err) {
	case codes.FailedPrecondition, codes.NotFound, codes.InvalidArgument, codes.PermissionDenied,
		codes.Unauthenticated, codes.ResourceExhausted, codes.Unimplemented:
		return true
	}
	return false
}
