package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
)

// goal decides, from a sandbox's latest record, whether a wait is over
// (done) or has failed (err). since is the revision the request returned:
// records older than it say nothing about the request.
type goal func(sb *corralv1.Sandbox, since int64) (done bool, err error)

// waitOptions say what a wait is for.
type waitOptions struct {
	goal        goal
	wantDeleted bool          // deletion is the goal, not a failure
	timeout     time.Duration // 0: no limit
	progress    io.Writer
}

// waitFor watches the sandboxes it is given (the records the requests
// returned) until each reaches its goal, printing phase changes.
func waitFor(ctx context.Context, c *client, targets []*corralv1.Sandbox, o waitOptions) error {
	if o.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.timeout)
		defer cancel()
	}
	since, names := map[string]int64{}, map[string]string{}
	for _, sb := range targets {
		since[sb.Id], names[sb.Id] = sb.Revision, sb.Name
	}
	g, wantDeleted, progress := o.goal, o.wantDeleted, o.progress
	req := &corralv1.WatchSandboxesRequest{}
	if len(targets) == 1 {
		req.Name = targets[0].Id
	}
	stream, err := c.WatchSandboxes(ctx, req)
	if err != nil {
		return c.explain(err)
	}
	remaining := map[string]bool{}
	last := map[string]string{}
	for _, sb := range targets {
		remaining[sb.Id] = true
		last[sb.Id] = sb.Phase + ": " + sb.Reason // print changes only
	}
	seen := map[string]bool{}
	var errs []error
	finish := func(id string, err error) {
		delete(remaining, id)
		if err != nil {
			errs = append(errs, err)
		}
	}
	for len(remaining) > 0 {
		ev, err := stream.Recv()
		if err != nil {
			for id := range remaining {
				errs = append(errs, lostWait(ctx, names[id], err, c))
			}
			break
		}
		if ev.Type == "SYNCED" {
			for id := range remaining {
				if !seen[id] && wantDeleted {
					finish(id, nil)
				} else if !seen[id] {
					finish(id, fmt.Errorf("sandbox %q was deleted", names[id]))
				}
			}
			continue
		}
		sb := ev.Sandbox
		if !remaining[sb.Id] {
			continue
		}
		seen[sb.Id] = true
		if ev.Type == "DELETED" {
			if wantDeleted {
				fmt.Fprintf(progress, "sandbox %q: deleted\n", sb.Name)
				finish(sb.Id, nil)
			} else {
				finish(sb.Id, fmt.Errorf("sandbox %q was deleted while waiting", sb.Name))
			}
			continue
		}
		if line := sb.Phase + ": " + sb.Reason; line != last[sb.Id] {
			last[sb.Id] = line
			if sb.Reason != "" {
				fmt.Fprintf(progress, "sandbox %q: %s (%s)\n", sb.Name, sb.Phase, oneLine(sb.Reason))
			} else {
				fmt.Fprintf(progress, "sandbox %q: %s\n", sb.Name, sb.Phase)
			}
		}
		if done, err := g(sb, since[sb.Id]); done || err != nil {
			finish(sb.Id, err)
		}
	}
	return errors.Join(errs...)
}

func lostWait(ctx context.Context, name string, err error, c *client) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("timed out waiting for sandbox %q; the gateway keeps working on it (see corral sandbox get %s)", name, name)
	}
	return fmt.Errorf("stopped waiting for sandbox %q: %s; the request stands (see corral sandbox get %s)", name, message(c.explain(err)), name)
}

// reached is the goal of being in phase want for the current intent; the
// error phase, once written after the request, fails the wait.
func reached(want string) goal {
	return func(sb *corralv1.Sandbox, since int64) (bool, error) {
		if sb.Revision < since {
			return false, nil
		}
		if sb.Phase == want {
			return true, nil
		}
		if sb.Phase == "error" && sb.Revision > since {
			return false, fmt.Errorf("sandbox %q: error: %s", sb.Name, sb.Reason)
		}
		return false, nil
	}
}

// running is the goal of create and start: ready, or already exited (a
// short command may be done before the wait sees it run).
func running(sb *corralv1.Sandbox, since int64) (bool, error) {
	if sb.Phase == "exited" && sb.Revision > since && !strings.Contains(sb.Reason, "restart ") {
		return true, nil
	}
	return reached("ready")(sb, since)
}
