package lifecycle

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/internal/driver/fake/faults"
	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

// A wait follows a request to its goal: running after a create, stopped
// after a stop, gone after a delete, with each change of phase reported.
func TestWaitFollowsRequestsToTheirGoals(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, nil)
		ctx := context.Background()
		sb := h.create("w")
		var phases []sandbox.Phase
		got, err := h.m.Wait(ctx, "w", GoalRunning, sb.Revision, func(sb *sandbox.Sandbox) { phases = append(phases, sb.Phase) })
		if err != nil || got.Phase != sandbox.PhaseReady {
			t.Fatalf("Wait running after create: %v, %v; want ready", got, err)
		}
		if len(phases) == 0 || phases[len(phases)-1] != sandbox.PhaseReady {
			t.Errorf("progress saw %v; want it to end with ready", phases)
		}

		stopped, err := h.m.Stop(ctx, "w")
		if err != nil {
			t.Fatal(err)
		}
		if got, err := h.m.Wait(ctx, stopped.ID, GoalStopped, stopped.Revision, nil); err != nil || got.Phase != sandbox.PhaseStopped {
			t.Fatalf("Wait stopped after stop: %v, %v; want stopped", got, err)
		}
		deleted, err := h.m.Delete(ctx, "w", false)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := h.m.Wait(ctx, "w", GoalDeleted, deleted.Revision, nil); err != nil || got != nil {
			t.Fatalf("Wait deleted after delete: %v, %v; want nil, nil", got, err)
		}
		// Waiting for a sandbox that is not there: done for a delete, not
		// found for anything else.
		if _, err := h.m.Wait(ctx, "w", GoalDeleted, 0, nil); err != nil {
			t.Errorf("Wait deleted of a deleted sandbox: %v; want done", err)
		}
		if _, err := h.m.Wait(ctx, "w", GoalRunning, 0, nil); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("Wait running of a deleted sandbox: %v; want not found", err)
		}
	})
}

// The error phase written after the request fails the wait with its
// reason; a goal the core does not know is refused.
func TestWaitFailsOnErrorAndBadGoals(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, func(c *Config) { c.ProvisioningTimeout = 100 * time.Millisecond })
		h.faults(faults.Rule{Op: "start", Action: "fail", Error: "engine on fire"})
		sb := h.create("doomed")
		_, err := h.m.Wait(context.Background(), "doomed", GoalRunning, sb.Revision, nil)
		if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "engine on fire") {
			t.Errorf("Wait running of a sandbox that errs: %v; want failed precondition with its reason", err)
		}
		if _, err := h.m.Wait(context.Background(), "doomed", Goal("asleep"), 0, nil); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Wait for an unknown goal: %v; want invalid argument", err)
		}
	})
}

// A wait ends with its context, the request standing.
func TestWaitEndsWithItsContext(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, nil)
		h.faults(faults.Rule{Op: "start", Action: "hold"})
		sb := h.create("slow")
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if _, err := h.m.Wait(ctx, "slow", GoalRunning, sb.Revision, nil); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Wait past its deadline: %v; want the deadline", err)
		}
		h.faults()
	})
}
