package lifecycle

import (
	"reflect"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

func TestDecide(t *testing.T) {
	const grace = 7 * time.Second
	record := func(desired sandbox.DesiredState, phase sandbox.Phase, gen int64) *sandbox.Sandbox {
		return &sandbox.Sandbox{ID: "sb1", Name: "web", Desired: desired, Phase: phase, Generation: gen,
			Spec: sandbox.Spec{Image: "img", Command: []string{"sleep", "1d"}, Labels: map[string]string{"k": "v"}, Policy: "version: 1\n"}}
	}
	object := func(state driver.State, gen int64) driver.Object {
		return driver.Object{ID: "sb1", Generation: gen, State: state}
	}
	stop := func(phase sandbox.Phase, gen int64, force bool) *action {
		return &action{kind: sandbox.OpDriverStop, phase: phase, gen: gen, ref: driver.Ref{ID: "sb1", Generation: gen},
			stop: driver.StopOptions{Timeout: grace, Force: force}}
	}
	start := func(phase sandbox.Phase, gen int64) *action {
		return &action{kind: sandbox.OpDriverStart, phase: phase, gen: gen, ref: driver.Ref{ID: "sb1", Generation: gen}}
	}
	create := func(phase sandbox.Phase, gen int64) *action {
		return &action{kind: sandbox.OpDriverCreate, phase: phase, gen: gen, spec: driver.Spec{ID: "sb1", Name: "web",
			Generation: gen, Image: "img", Command: []string{"sleep", "1d"}, Labels: map[string]string{"k": "v"},
		}, policy: record("", "", 0).Spec.Policy}
	}
	del := func(gen int64) *action {
		return &action{kind: sandbox.OpDriverDelete, phase: sandbox.PhaseDeleting, gen: gen, ref: driver.Ref{ID: "sb1"}}
	}
	none := (*action)(nil)

	cases := []struct {
		name     string
		sb       *sandbox.Sandbox
		obs      driver.Object
		found    bool
		force    bool
		failures int
		want     *action // nil: nothing to do
	}{
		// delete: a graceful stop first, unless forced or it already failed
		{"delete running: stop first", record(sandbox.DesiredDeleted, sandbox.PhaseReady, 2), object(driver.StateRunning, 2), true, false, 0, stop(sandbox.PhaseDeleting, 2, false)},
		{"delete running an old incarnation: stop it", record(sandbox.DesiredDeleted, sandbox.PhaseReady, 3), object(driver.StateRunning, 2), true, false, 0, stop(sandbox.PhaseDeleting, 2, false)},
		{"delete running, forced", record(sandbox.DesiredDeleted, sandbox.PhaseReady, 2), object(driver.StateRunning, 2), true, true, 0, del(2)},
		{"delete running after a failure", record(sandbox.DesiredDeleted, sandbox.PhaseDeleting, 2), object(driver.StateRunning, 2), true, false, 1, del(2)},
		{"delete stopped", record(sandbox.DesiredDeleted, sandbox.PhaseStopped, 2), object(driver.StateStopped, 2), true, false, 0, del(2)},
		{"delete created", record(sandbox.DesiredDeleted, sandbox.PhaseProvisioning, 1), object(driver.StateCreated, 1), true, false, 0, del(1)},
		{"delete failed", record(sandbox.DesiredDeleted, sandbox.PhaseError, 1), object(driver.StateFailed, 1), true, false, 0, del(1)},
		{"delete missing", record(sandbox.DesiredDeleted, sandbox.PhaseDeleting, 1), driver.Object{}, false, false, 0, del(1)},

		// stop: only what runs is stopped, whichever incarnation it is
		{"stop running", record(sandbox.DesiredStopped, sandbox.PhaseReady, 2), object(driver.StateRunning, 2), true, false, 0, stop(sandbox.PhaseStopping, 2, false)},
		{"stop running, forced", record(sandbox.DesiredStopped, sandbox.PhaseStopping, 2), object(driver.StateRunning, 2), true, true, 3, stop(sandbox.PhaseStopping, 2, true)},
		{"stop running an old incarnation", record(sandbox.DesiredStopped, sandbox.PhaseStopping, 3), object(driver.StateRunning, 2), true, false, 0, stop(sandbox.PhaseStopping, 2, false)},
		{"stop stopped", record(sandbox.DesiredStopped, sandbox.PhaseStopping, 2), object(driver.StateStopped, 2), true, false, 0, none},
		{"stop created", record(sandbox.DesiredStopped, sandbox.PhaseProvisioning, 1), object(driver.StateCreated, 1), true, false, 0, none},
		{"stop failed", record(sandbox.DesiredStopped, sandbox.PhaseError, 1), object(driver.StateFailed, 1), true, false, 0, none},
		{"stop missing", record(sandbox.DesiredStopped, sandbox.PhaseStopping, 1), driver.Object{}, false, false, 0, none},

		// run: create what is missing, start what is not running, retire an old incarnation
		{"run missing", record(sandbox.DesiredRunning, sandbox.PhaseProvisioning, 1), driver.Object{}, false, false, 0, create(sandbox.PhaseProvisioning, 1)},
		{"run missing, once ready", record(sandbox.DesiredRunning, sandbox.PhaseReady, 2), driver.Object{}, false, false, 0, create(sandbox.PhaseProvisioning, 2)},
		{"run created, provisioning", record(sandbox.DesiredRunning, sandbox.PhaseProvisioning, 1), object(driver.StateCreated, 1), true, false, 0, start(sandbox.PhaseProvisioning, 1)},
		{"run created, starting", record(sandbox.DesiredRunning, sandbox.PhaseStarting, 1), object(driver.StateCreated, 1), true, false, 0, start(sandbox.PhaseStarting, 1)},
		{"run stopped", record(sandbox.DesiredRunning, sandbox.PhaseStopped, 2), object(driver.StateStopped, 2), true, false, 0, start(sandbox.PhaseStarting, 2)},
		{"run failed", record(sandbox.DesiredRunning, sandbox.PhaseError, 2), object(driver.StateFailed, 2), true, false, 0, start(sandbox.PhaseStarting, 2)},
		{"run running", record(sandbox.DesiredRunning, sandbox.PhaseReady, 2), object(driver.StateRunning, 2), true, false, 0, none},
		{"run running, forced and failing", record(sandbox.DesiredRunning, sandbox.PhaseStarting, 2), object(driver.StateRunning, 2), true, true, 4, none},
		{"run over an old incarnation that runs", record(sandbox.DesiredRunning, sandbox.PhaseStarting, 3), object(driver.StateRunning, 2), true, false, 0, stop(sandbox.PhaseStarting, 2, false)},
		{"run over an old incarnation that runs, provisioning", record(sandbox.DesiredRunning, sandbox.PhaseProvisioning, 3), object(driver.StateRunning, 2), true, false, 0, stop(sandbox.PhaseProvisioning, 2, false)},
		{"run over an old stopped incarnation", record(sandbox.DesiredRunning, sandbox.PhaseStarting, 3), object(driver.StateStopped, 2), true, false, 0, create(sandbox.PhaseStarting, 3)},
		{"run over an old created incarnation", record(sandbox.DesiredRunning, sandbox.PhaseStarting, 3), object(driver.StateCreated, 2), true, false, 0, create(sandbox.PhaseStarting, 3)},
		{"run over an old failed incarnation, provisioning", record(sandbox.DesiredRunning, sandbox.PhaseProvisioning, 3), object(driver.StateFailed, 2), true, false, 0, create(sandbox.PhaseProvisioning, 3)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := decide(situation{sb: tc.sb, obs: tc.obs, found: tc.found, force: tc.force, failures: tc.failures, stopTimeout: grace})
			switch {
			case tc.want == nil && ok:
				t.Fatalf("decide = %+v, want nothing to do", got)
			case tc.want != nil && !ok:
				t.Fatalf("decide = nothing to do, want %+v", *tc.want)
			case tc.want != nil && !reflect.DeepEqual(got, *tc.want):
				t.Fatalf("decide = %+v\nwant     %+v", got, *tc.want)
			}
		})
	}
}
