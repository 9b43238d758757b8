package lifecycle

import (
	"context"
	"strings"

	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

// Goal is what a wait waits for after a request: the state the request
// asked for.
type Goal string

// The goals of a wait.
const (
	// GoalRunning is the goal of a create or a start: ready, or already
	// exited for good (a short command may end before the wait sees it
	// run).
	GoalRunning Goal = "running"
	// GoalStopped is the goal of a stop.
	GoalStopped Goal = "stopped"
	// GoalDeleted is the goal of a delete: the record is gone.
	GoalDeleted Goal = "deleted"
	// GoalPaused is the goal of a pause.
	GoalPaused Goal = "paused"
)

// Goals lists the goals a wait accepts.
var Goals = []Goal{GoalRunning, GoalStopped, GoalDeleted, GoalPaused}

// Wait follows sandbox nameOrID until it reaches goal, and returns its
// record then (nil for GoalDeleted). since is the revision the request
// returned: records older than it say nothing about the request, and an
// error phase written after it fails the wait (errdefs.ErrFailedPrecondition
// with the reason). progress, when set, is called with the record at each
// change of its phase or reason. A sandbox deleted while it waits for
// another goal is errdefs.ErrNotFound; a wait that the gateway ends (it
// shuts down, or the waiter fell behind) is errdefs.ErrUnavailable. ctx
// bounds the wait: the request stands when it ends.
func (m *Manager) Wait(ctx context.Context, nameOrID string, goal Goal, since int64, progress func(*sandbox.Sandbox)) (*sandbox.Sandbox, error) {
	reached, err := goalFunc(goal)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the watch
	events, err := m.WatchSandboxes(ctx, nameOrID)
	if err != nil {
		return nil, err
	}
	var last *sandbox.Sandbox
	for ev := range events {
		switch {
		case ev.Type == EventSynced && last == nil, ev.Type == EventDeleted:
			if goal == GoalDeleted {
				return nil, nil
			}
			name := nameOrID
			if last != nil {
				name = last.Name
			}
			return nil, errdefs.NotFound("sandbox %q was deleted while waiting for it to be %s", name, goal)
		case ev.Sandbox == nil:
			continue
		}
		sb := ev.Sandbox
		if progress != nil && (last == nil || last.Phase != sb.Phase || last.Reason != sb.Reason) {
			progress(sb)
		}
		last = sb
		if done, err := reached(sb, since); done || err != nil {
			return sb, err
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return nil, errdefs.Unavailable("the wait ended: the gateway is shutting down or this waiter fell behind; the request stands")
}

// goalFunc decides, from a sandbox's latest record, whether a wait for
// goal is over (done) or has failed (err).
func goalFunc(goal Goal) (func(sb *sandbox.Sandbox, since int64) (bool, error), error) {
	switch goal {
	case GoalRunning:
		return func(sb *sandbox.Sandbox, since int64) (bool, error) {
			if sb.Phase == sandbox.PhaseExited && sb.Revision > since && !strings.Contains(sb.Reason, "restart ") {
				return true, nil
			}
			return inPhase(sb, since, sandbox.PhaseReady)
		}, nil
	case GoalStopped:
		return func(sb *sandbox.Sandbox, since int64) (bool, error) { return inPhase(sb, since, sandbox.PhaseStopped) }, nil
	case GoalPaused:
		return func(sb *sandbox.Sandbox, since int64) (bool, error) { return inPhase(sb, since, sandbox.PhasePaused) }, nil
	case GoalDeleted:
		return func(sb *sandbox.Sandbox, since int64) (bool, error) {
			if sb.Phase == sandbox.PhaseError && sb.Revision > since {
				return false, errdefs.FailedPrecondition("sandbox %q is not deleted yet: %s; the gateway keeps trying", sb.Name, sb.Reason)
			}
			return false, nil
		}, nil
	}
	return nil, errdefs.InvalidArgument("wait for %s: want one of %v", quote(string(goal)), Goals)
}

// inPhase is whether sb, at a revision since the request's, is in phase
// want; the error phase written after the request fails the wait.
func inPhase(sb *sandbox.Sandbox, since int64, want sandbox.Phase) (bool, error) {
	if sb.Revision < since {
		return false, nil
	}
	if sb.Phase == want {
		return true, nil
	}
	if sb.Phase == sandbox.PhaseError && sb.Revision > since {
		return false, errdefs.FailedPrecondition("sandbox %q: error: %s", sb.Name, sb.Reason)
	}
	return false, nil
}
