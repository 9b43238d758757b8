package lifecycle

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/internal/sandbox"
)

func (h *harness) createWithPolicy(name, pol string) *sandbox.Sandbox {
	h.t.Helper()
	sb, _, err := h.m.Create(context.Background(), name, "", sandbox.Spec{Command: []string{"sleep", "1d"}, Policy: pol})
	if err != nil {
		h.t.Fatalf("create %s: %v", name, err)
	}
	return sb
}

// idle_timeout pauses a sandbox left alone, not one in use; the journal
// says why.
func TestIdleTimeout(t *testing.T) {
	h := newHarness(t, nil)
	idle := h.createWithPolicy("idle", "version: 1\nlifecycle:\n  idle_timeout: 2s\n")
	h.createWithPolicy("busy", "version: 1\nlifecycle:\n  idle_timeout: 2s\n  on_idle: stop\n")
	h.waitPhase("idle", sandbox.PhaseReady)
	h.waitPhase("busy", sandbox.PhaseReady)
	for range 12 { // 4 s of an exec every third of a second
		if _, _, err := h.exec("busy", "", "true"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second / 3)
	}
	if got, _ := h.m.Get(context.Background(), "busy"); got.Phase != sandbox.PhaseReady {
		t.Errorf("a sandbox in use went %s", got.Phase)
	}
	h.waitPhase("idle", sandbox.PhasePaused)
	ops := h.journal(idle.ID)
	if last := ops[len(ops)-2]; last.Kind != sandbox.OpPause || !strings.Contains(last.Detail, "idle for") || last.Actor != "" {
		t.Errorf("the pause's entry: %+v", last)
	}
	h.waitPhase("busy", sandbox.PhaseStopped) // left alone now
}

// max_lifetime deletes (or stops) a sandbox that long after its creation,
// also when the gateway was down at that moment: the deadline is the
// record's.
func TestMaxLifetimeAcrossARestart(t *testing.T) {
	h := newHarness(t, nil)
	h.createWithPolicy("brief", "version: 1\nlifecycle:\n  max_lifetime: 2s\n  on_expiry: delete\n")
	h.createWithPolicy("kept", "version: 1\nlifecycle:\n  max_lifetime: 2s\n")
	h.waitPhase("brief", sandbox.PhaseReady)
	h.stop(5 * time.Second)
	time.Sleep(2500 * time.Millisecond) // the deadline passes while no gateway runs
	h.start()
	h.waitGone("brief")
	h.waitPhase("kept", sandbox.PhaseStopped) // on_expiry defaults to stop
	if got, _ := h.m.Get(context.Background(), "kept"); got.Desired != sandbox.DesiredStopped {
		t.Errorf("kept: %s", got.Desired)
	}
}
