package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/driver/fake"
	"github.com/corral-sandbox/corral/internal/driver/fake/faults"
	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/store/sqlite"
	"github.com/corral-sandbox/corral/internal/testenv"
)

const (
	label     = "corral.test"
	gatewayID = "0123456789abcdef"
)

// harness is a manager on a real SQLite store and a fake driver, which can
// be restarted as a new gateway instance over the same files.
type harness struct {
	t        *testing.T
	dir      string
	st       *sqlite.Store
	drv      *fake.Driver
	m        *Manager
	n        int
	tweak    func(*Config)
	stateDir string
}

func newHarness(t *testing.T, tweak func(*Config)) *harness {
	h := &harness{t: t, dir: testenv.MemDir(t), tweak: tweak}
	h.stateDir = filepath.Join(h.dir, "fake")
	h.start()
	t.Cleanup(func() { h.stop(5 * time.Second) })
	return h
}

func (h *harness) start() {
	h.t.Helper()
	var err error
	h.st, err = sqlite.Open(context.Background(), filepath.Join(h.dir, "corral.db"))
	if err != nil {
		h.t.Fatal(err)
	}
	h.drv, err = fake.New(driver.Config{Label: label, Gateway: gatewayID, StateDir: h.stateDir}, fake.Options{Faults: faults.File(h.stateDir)})
	if err != nil {
		h.t.Fatal(err)
	}
	h.n++
	cfg := Config{
		Store: h.st, Driver: h.drv, Instance: "test-" + string(rune('a'+h.n)), Gateway: gatewayID,
		Logger:    slog.New(slog.NewTextHandler(io.Discard, nil)),
		RetryBase: 5 * time.Millisecond, RetryMax: 50 * time.Millisecond, RestartBase: 5 * time.Millisecond,
	}
	if h.tweak != nil {
		h.tweak(&cfg)
	}
	h.m = New(cfg)
	if err := h.m.Recover(context.Background()); err != nil {
		h.t.Fatal(err)
	}
	h.m.WatchDriver()
}

func (h *harness) stop(budget time.Duration) {
	if h.m == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	if err := h.m.Shutdown(ctx, time.Second); err != nil {
		h.t.Errorf("shutdown: %v", err)
	}
	h.st.Close()
	h.m = nil
}

func (h *harness) restart() {
	h.stop(5 * time.Second)
	h.start()
}

// bubble runs a test in parallel with the others, in a testing/synctest
// bubble: its clock moves only when every goroutine of the test waits, so
// backoff, deadlines, grace periods and the fake driver's polling cost no
// real time, and a test that hangs fails at once instead of after the limit.
// (SQLite and the fake driver's files are real I/O; while it is under way
// the bubble's clock stands still, as it should.)
func bubble(t *testing.T, test func(t *testing.T)) {
	t.Parallel()
	synctest.Test(t, test)
}

// waitFor waits until cond holds; the generous limit only bounds a hang.
func (h *harness) waitFor(what string, cond func() bool) {
	h.t.Helper()
	testenv.Eventually(h.t, 20*time.Second, func() error {
		if !cond() {
			return errors.New("waiting for " + what)
		}
		return nil
	})
}

func (h *harness) waitPhase(name string, phase sandbox.Phase) *sandbox.Sandbox {
	h.t.Helper()
	var sb *sandbox.Sandbox
	h.waitFor(name+" "+string(phase), func() bool {
		var err error
		sb, err = h.m.Get(context.Background(), name)
		return err == nil && sb.Phase == phase && sb.Converged() == (phase == sandbox.PhaseReady || phase == sandbox.PhaseStopped || phase == sandbox.PhaseExited || phase == sandbox.PhasePaused)
	})
	return sb
}

func (h *harness) waitGone(name string) {
	h.t.Helper()
	h.waitFor(name+" deleted", func() bool {
		_, err := h.m.Get(context.Background(), name)
		return errors.Is(err, errdefs.ErrNotFound)
	})
}

func (h *harness) create(name string) *sandbox.Sandbox {
	h.t.Helper()
	sb, created, err := h.m.Create(context.Background(), name, "", sandbox.Spec{Command: []string{"sleep", "1d"}})
	if err != nil || !created {
		h.t.Fatalf("create %s: created=%v err=%v", name, created, err)
	}
	return sb
}

func (h *harness) object(id string) (driver.Object, bool) {
	h.t.Helper()
	o, err := h.drv.Inspect(context.Background(), id)
	if errors.Is(err, errdefs.ErrNotFound) {
		return o, false
	}
	if err != nil {
		h.t.Fatal(err)
	}
	return o, true
}

func (h *harness) faults(rules ...faults.Rule) {
	h.t.Helper()
	if err := faults.Set(h.stateDir, rules...); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) held(op, id string) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := faults.WaitHeld(ctx, h.stateDir, op, id); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) journal(id string) []*sandbox.Operation {
	h.t.Helper()
	ops, err := h.st.ListOperations(context.Background(), id)
	if err != nil {
		h.t.Fatal(err)
	}
	return ops
}

func TestCreateConvergesAndJournals(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, nil)
		sb := h.create("web")
		if sb.Phase != sandbox.PhaseProvisioning || sb.Desired != sandbox.DesiredRunning || sb.Generation != 1 {
			t.Fatalf("new record = %s/%s gen %d", sb.Phase, sb.Desired, sb.Generation)
		}
		h.waitPhase("web", sandbox.PhaseReady)
		o, ok := h.object(sb.ID)
		if !ok || o.State != driver.StateRunning || o.Generation != 1 {
			t.Fatalf("driver object = %+v, found %v", o, ok)
		}
		var kinds []string
		for _, op := range h.journal(sb.ID) {
			if op.State != sandbox.OpSucceeded || op.Deadline.IsZero() || op.Owner == "" {
				t.Errorf("journal entry %s: state %s deadline %v owner %q", op.Kind, op.State, op.Deadline, op.Owner)
			}
			kinds = append(kinds, string(op.Kind))
		}
		want := []string{"create", "driver.create", "driver.start"}
		if len(kinds) != len(want) {
			t.Fatalf("journal kinds = %v, want %v", kinds, want)
		}
		for i := range want {
			if kinds[i] != want[i] {
				t.Fatalf("journal kinds = %v, want %v", kinds, want)
			}
		}
	})
}

func TestCreateRetryWithRequestIDMakesOneSandbox(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, nil)
		spec := sandbox.Spec{Command: []string{"true"}}
		first, created, err := h.m.Create(context.Background(), "job", "req-1", spec)
		if err != nil || !created {
			t.Fatalf("first create: %v %v", created, err)
		}
		h.waitPhase("job", sandbox.PhaseReady)
		again, created, err := h.m.Create(context.Background(), "job", "req-1", spec)
		if err != nil || created || again.ID != first.ID {
			t.Fatalf("retried create: created=%v id=%s (first %s) err=%v", created, again.ID, first.ID, err)
		}
		h.waitPhase("job", sandbox.PhaseReady)
		if n, _ := fake.Starts(h.stateDir, first.ID); n != 1 {
			t.Fatalf("driver starts = %d, want 1", n)
		}
		if _, _, err := h.m.Create(context.Background(), "job", "req-2", spec); !errors.Is(err, errdefs.ErrAlreadyExists) {
			t.Fatalf("create with a taken name: %v, want already exists", err)
		}
	})
}

func TestStopThenStartBeforeTheActorRunsRestartsWithNewGeneration(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, nil)
		sb := h.create("svc")
		h.waitPhase("svc", sandbox.PhaseReady)
		h.faults(faults.Rule{Op: "inspect", Sandbox: sb.ID, Action: "hold"})
		// the resync's inspect is held, so both requests land before a step
		if err := h.m.Resync(context.Background()); err != nil {
			t.Fatal(err)
		}
		h.held("inspect", sb.ID)
		if _, err := h.m.Stop(context.Background(), "svc"); err != nil {
			t.Fatal(err)
		}
		if _, err := h.m.Start(context.Background(), "svc"); err != nil {
			t.Fatal(err)
		}
		h.faults()
		got := h.waitPhase("svc", sandbox.PhaseReady)
		if got.Generation != 2 {
			t.Fatalf("generation = %d, want 2", got.Generation)
		}
		o, _ := h.object(sb.ID)
		if o.Generation != 2 || o.State != driver.StateRunning {
			t.Fatalf("object = %+v, want generation 2 running", o)
		}
		if n, _ := fake.Starts(h.stateDir, sb.ID); n != 2 {
			t.Fatalf("driver starts = %d, want 2 (the stop was honoured)", n)
		}
	})
}

func TestFailuresRetryAndTurnToErrorPastTheDeadline(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, func(c *Config) { c.ProvisioningTimeout = 100 * time.Millisecond })
		h.faults(faults.Rule{Op: "start", Action: "fail", Error: "engine on fire"})
		sb := h.create("flaky")
		got := h.waitPhase("flaky", sandbox.PhaseError)
		if got.Reason == "" || !contains(got.Reason, "engine on fire") || !contains(got.Reason, "deadline") {
			t.Fatalf("reason = %q", got.Reason)
		}
		if got.LastRequest == nil || got.LastRequest.State != sandbox.OpTimedOut {
			t.Fatalf("create request = %+v, want timed_out", got.LastRequest)
		}
		h.faults()
		h.waitPhase("flaky", sandbox.PhaseReady) // the reconciler kept trying
		failed := 0
		for _, op := range h.journal(sb.ID) {
			if op.Kind == sandbox.OpDriverStart && op.State == sandbox.OpFailed {
				failed++
			}
		}
		if failed == 0 {
			t.Fatal("no failed driver.start attempt journaled")
		}
	})
}

func TestDriverEventsDoNotShortenTheBackoff(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, func(c *Config) { c.RetryBase, c.RetryMax = 10*time.Second, 10*time.Second })
		h.faults(faults.Rule{Op: "start", Action: "fail", Error: "argument list too long"})
		sb := h.create("doomed")
		failedStarts := func() int {
			n := 0
			for _, op := range h.journal(sb.ID) {
				if op.Kind == sandbox.OpDriverStart && op.State == sandbox.OpFailed {
					n++
				}
			}
			return n
		}
		h.waitFor("a failed start", func() bool { return failedStarts() >= 1 })
		for range 50 { // a driver event or a resync every 100 ms, for 5 s: half the backoff
			if err := h.m.Resync(context.Background()); err != nil {
				t.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		synctest.Wait()
		if n := failedStarts(); n != 1 {
			t.Fatalf("%d failed starts within half of a 10 s backoff, want 1: resyncs cut the backoff short", n)
		}
		time.Sleep(6 * time.Second) // past the backoff: the retry comes
		synctest.Wait()
		if n := failedStarts(); n != 2 {
			t.Fatalf("%d failed starts after the backoff, want 2", n)
		}
		if _, err := h.m.Delete(context.Background(), "doomed", false); err != nil { // a changed intent acts at once
			t.Fatal(err)
		}
		h.waitGone("doomed")
	})
}

func TestDeleteFinishesInEveryPhase(t *testing.T) {
	cases := []struct {
		name  string
		setup func(h *harness, sb *sandbox.Sandbox)
	}{
		{"provisioning with create held", func(h *harness, sb *sandbox.Sandbox) {
			h.held("create", sb.ID)
		}},
		{"provisioning with start held", func(h *harness, sb *sandbox.Sandbox) {
			h.held("start", sb.ID)
		}},
		{"ready", func(h *harness, sb *sandbox.Sandbox) {
			h.waitPhase(sb.Name, sandbox.PhaseReady)
		}},
		{"stopping with stop held", func(h *harness, sb *sandbox.Sandbox) {
			h.waitPhase(sb.Name, sandbox.PhaseReady)
			h.faults(faults.Rule{Op: "stop", Action: "hold"})
			if _, err := h.m.Stop(context.Background(), sb.Name); err != nil {
				h.t.Fatal(err)
			}
			h.held("stop", sb.ID)
		}},
		{"stopped", func(h *harness, sb *sandbox.Sandbox) {
			h.waitPhase(sb.Name, sandbox.PhaseReady)
			if _, err := h.m.Stop(context.Background(), sb.Name); err != nil {
				h.t.Fatal(err)
			}
			h.waitPhase(sb.Name, sandbox.PhaseStopped)
		}},
		{"starting with start held", func(h *harness, sb *sandbox.Sandbox) {
			h.waitPhase(sb.Name, sandbox.PhaseReady)
			if _, err := h.m.Stop(context.Background(), sb.Name); err != nil {
				h.t.Fatal(err)
			}
			h.waitPhase(sb.Name, sandbox.PhaseStopped)
			h.faults(faults.Rule{Op: "start", Action: "hold"})
			if _, err := h.m.Start(context.Background(), sb.Name); err != nil {
				h.t.Fatal(err)
			}
			h.held("start", sb.ID)
		}},
		{"error", func(h *harness, sb *sandbox.Sandbox) {
			h.waitPhase(sb.Name, sandbox.PhaseError)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			bubble(t, func(t *testing.T) {
				h := newHarness(t, func(c *Config) { c.ProvisioningTimeout = time.Hour })
				switch tc.name {
				case "provisioning with create held":
					h.faults(faults.Rule{Op: "create", Action: "hold"})
				case "provisioning with start held":
					h.faults(faults.Rule{Op: "start", Action: "hold"})
				case "error":
					h.restartWith(func(c *Config) { c.ProvisioningTimeout = 50 * time.Millisecond })
					h.faults(faults.Rule{Op: "start", Action: "fail"})
				}
				sb := h.create("victim")
				tc.setup(h, sb)
				if _, err := h.m.Delete(context.Background(), "victim", false); err != nil {
					t.Fatal(err)
				}
				h.waitGone("victim")
				if o, ok := h.object(sb.ID); ok {
					t.Fatalf("driver still holds %+v", o)
				}
				if ops := h.journal(sb.ID); len(ops) != 0 {
					t.Fatalf("journal of a deleted sandbox kept %d entries", len(ops))
				}
			})
		})
	}
}

// A forced delete removes by label whatever is there, so it does not ask
// the driver first what there is: it finishes while Inspect is broken.
// Removing a record on the caller's word that its compute is gone needs
// force and a reason; with both it is removed without the driver.
func TestAssumeGoneNeedsForceAndAReason(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, nil)
		h.create("lost")
		h.waitPhase("lost", sandbox.PhaseReady)
		ctx := context.Background()
		if _, err := h.m.AssumeGone(ctx, "lost", false, "host burned"); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "--force") {
			t.Errorf("assume-gone without force: %v; want invalid argument naming --force", err)
		}
		if _, err := h.m.AssumeGone(ctx, "lost", true, ""); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "--reason") {
			t.Errorf("assume-gone without a reason: %v; want invalid argument naming --reason", err)
		}
		if _, err := h.m.Get(ctx, "lost"); err != nil {
			t.Fatalf("a refused assume-gone removed the record: %v", err)
		}
		if _, err := h.m.AssumeGone(ctx, "lost", true, "host burned"); err != nil {
			t.Fatal(err)
		}
		h.waitGone("lost")
	})
}

func TestForcedDeleteNeedsNoInspect(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, nil)
		sb := h.create("forced")
		h.waitPhase(sb.Name, sandbox.PhaseReady)
		h.faults(faults.Rule{Op: "inspect", Sandbox: sb.ID, Action: "fail", Error: "inspect is broken"})
		if _, err := h.m.Delete(context.Background(), sb.Name, true); err != nil {
			t.Fatal(err)
		}
		h.waitGone(sb.Name)
		h.faults()
		if o, ok := h.object(sb.ID); ok {
			t.Fatalf("driver still holds %+v", o)
		}
	})
}

// A delete the driver confirmed removes the record at once: the driver is
// not asked again whether the object is gone (here it could not answer).
func TestConfirmedDeleteRemovesTheRecord(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, nil)
		sb := h.create("confirmed")
		h.waitPhase(sb.Name, sandbox.PhaseReady)
		h.faults(faults.Rule{Op: "delete", Action: "hold"})
		if _, err := h.m.Delete(context.Background(), sb.Name, false); err != nil { // not forced: it inspects first
			t.Fatal(err)
		}
		h.held("delete", sb.ID)
		h.faults(faults.Rule{Op: "inspect", Sandbox: sb.ID, Action: "fail", Error: "inspect is broken"})
		h.waitGone(sb.Name)
		h.faults()
		if o, ok := h.object(sb.ID); ok {
			t.Fatalf("driver still holds %+v", o)
		}
	})
}

func (h *harness) restartWith(tweak func(*Config)) {
	h.tweak = tweak
	h.restart()
}

func TestShutdownWaitsForHeldCallAndRecordsIt(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, nil)
		h.faults(faults.Rule{Op: "start", Action: "hold"})
		sb := h.create("slow")
		h.held("start", sb.ID)
		done := make(chan struct{})
		go func() {
			defer close(done)
			h.stop(20 * time.Second)
		}()
		time.Sleep(100 * time.Millisecond) // the bubble's clock: the held call goes on polling its rules
		synctest.Wait()
		select {
		case <-done:
			t.Fatal("shutdown returned while a driver call was held")
		default:
		}
		h.faults()
		<-done
		st, err := sqlite.Open(context.Background(), filepath.Join(h.dir, "corral.db"))
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		ops, _ := st.ListOperations(context.Background(), sb.ID)
		var start *sandbox.Operation
		for _, op := range ops {
			if op.Kind == sandbox.OpDriverStart {
				start = op
			}
			if op.State == sandbox.OpPending {
				t.Errorf("entry %s left pending after shutdown", op.Kind)
			}
		}
		if start == nil || start.State != sandbox.OpSucceeded {
			t.Fatalf("driver.start entry = %+v, want succeeded", start)
		}
	})
}

func TestShutdownBudgetInterruptsAndNextInstanceConverges(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, nil)
		h.faults(faults.Rule{Op: "start", Action: "hold"})
		sb := h.create("stuck")
		h.held("start", sb.ID)
		h.stop(50 * time.Millisecond)
		ops := h.journalAfterStop(sb.ID)
		for _, op := range ops {
			if op.State == sandbox.OpPending {
				t.Fatalf("entry %s left pending", op.Kind)
			}
		}
		if last := ops[len(ops)-1]; last.Kind != sandbox.OpDriverStart || last.State != sandbox.OpInterrupted {
			t.Fatalf("last entry = %s %s, want driver.start interrupted", last.Kind, last.State)
		}
		h.faults()
		h.start()
		h.waitPhase("stuck", sandbox.PhaseReady)
	})
}

func (h *harness) journalAfterStop(id string) []*sandbox.Operation {
	h.t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(h.dir, "corral.db"))
	if err != nil {
		h.t.Fatal(err)
	}
	defer st.Close()
	ops, err := st.ListOperations(context.Background(), id)
	if err != nil || len(ops) == 0 {
		h.t.Fatalf("journal: %d entries, %v", len(ops), err)
	}
	return ops
}

func TestRecoverSettlesEntriesOfDeadInstances(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, nil)
		sb := h.create("orphan")
		h.waitPhase("orphan", sandbox.PhaseReady)
		ghost := &sandbox.Operation{SandboxID: sb.ID, Kind: sandbox.OpDriverStop, State: sandbox.OpPending,
			Owner: "dead-instance", Attempt: 1, Generation: 1, StartedAt: time.Now(), Deadline: time.Now().Add(time.Hour)}
		if err := h.st.PutOperation(context.Background(), ghost); err != nil {
			t.Fatal(err)
		}
		h.restart()
		for _, op := range h.journal(sb.ID) {
			if op.ID == ghost.ID && (op.State != sandbox.OpInterrupted || !contains(op.Error, "interrupted")) {
				t.Fatalf("dead instance's entry = %s %q, want interrupted", op.State, op.Error)
			}
		}
		h.waitPhase("orphan", sandbox.PhaseReady)
	})
}

func TestRunningSandboxSurvivesRestartsWithOneStart(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, nil)
		sb := h.create("steady")
		h.waitPhase("steady", sandbox.PhaseReady)
		for range 50 {
			h.restart()
			h.waitPhase("steady", sandbox.PhaseReady)
		}
		if n, _ := fake.Starts(h.stateDir, sb.ID); n != 1 {
			t.Fatalf("driver starts over 50 restarts = %d, want 1", n)
		}
	})
}

func TestDriftIsRepairedByResync(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, nil)
		sb := h.create("drifty")
		h.waitPhase("drifty", sandbox.PhaseReady)
		if err := h.drv.Stop(context.Background(), driver.Ref{ID: sb.ID, Generation: 1}, driver.StopOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := h.m.Resync(context.Background()); err != nil {
			t.Fatal(err)
		}
		h.waitFor("object running again", func() bool {
			o, ok := h.object(sb.ID)
			return ok && o.State == driver.StateRunning
		})
		h.waitPhase("drifty", sandbox.PhaseReady)
	})
}

func TestConcurrentRequestsOnManySandboxes(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, nil)
		var wg sync.WaitGroup
		names := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
		for _, n := range names {
			h.create(n)
		}
		for _, n := range names {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 40 {
					var err error
					if i%2 == 0 {
						_, err = h.m.Stop(context.Background(), n)
					} else {
						_, err = h.m.Start(context.Background(), n)
					}
					if err != nil {
						t.Errorf("%s request %d: %v", n, i, err)
					}
				}
			}()
		}
		wg.Wait()
		for _, n := range names {
			sb := h.waitPhase(n, sandbox.PhaseReady)
			for _, op := range h.journal(sb.ID) {
				if op.State == sandbox.OpPending {
					t.Errorf("%s: entry %d %s still pending after convergence", n, op.ID, op.Kind)
				}
			}
		}
		if _, err := h.m.Stop(context.Background(), "nope"); !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("stop of an unknown sandbox: %v", err)
		}
	})
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

func TestMainProcessExitFollowsTheRestartPolicy(t *testing.T) {
	cases := []struct {
		policy       string
		code         int
		wantRestarts int
	}{
		{sandbox.RestartNever, 1, 0},
		{sandbox.RestartOnFailure, 0, 0},
		{sandbox.RestartOnFailure, 3, 2},
		{sandbox.RestartAlways, 0, 2},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s exit %d", tc.policy, tc.code), func(t *testing.T) {
			bubble(t, func(t *testing.T) {
				h := newHarness(t, nil)
				sb, _, err := h.m.Create(context.Background(), "job", "", sandbox.Spec{RestartPolicy: tc.policy, MaxRestarts: 2})
				if err != nil {
					t.Fatal(err)
				}
				for gen := int64(1); ; gen++ {
					h.waitFor(fmt.Sprintf("generation %d running", gen), func() bool {
						o, ok := h.object(sb.ID)
						return ok && o.Generation == gen && o.State == driver.StateRunning
					})
					h.waitPhase("job", sandbox.PhaseReady)
					if err := fake.Exit(h.stateDir, sb.ID, tc.code); err != nil {
						t.Fatal(err)
					}
					if gen > int64(tc.wantRestarts) {
						break
					}
				}
				got := h.waitPhase("job", sandbox.PhaseExited)
				if got.ExitCode == nil || *got.ExitCode != tc.code || got.Restarts != tc.wantRestarts {
					t.Fatalf("exited record: code %v restarts %d reason %q", got.ExitCode, got.Restarts, got.Reason)
				}
				if !strings.Contains(got.Reason, fmt.Sprintf("exited with code %d", tc.code)) {
					t.Fatalf("reason %q", got.Reason)
				}
				// start brings an exited sandbox back as a new generation
				if _, err := h.m.Start(context.Background(), "job"); err != nil {
					t.Fatal(err)
				}
				again := h.waitPhase("job", sandbox.PhaseReady)
				if again.Generation != got.Generation+1 || again.Restarts != 0 {
					t.Fatalf("after start: generation %d restarts %d", again.Generation, again.Restarts)
				}
			})
		})
	}
}

func TestInvalidRestartPolicyIsRefused(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, nil)
		_, _, err := h.m.Create(context.Background(), "x", "", sandbox.Spec{RestartPolicy: "sometimes"})
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), `"sometimes"`) {
			t.Fatalf("err = %v", err)
		}
		if list, _ := h.m.List(context.Background()); len(list) != 0 {
			t.Fatalf("%d records after a refused create", len(list))
		}
	})
}

// leftoverDriver is the fake driver with storage of its own that outlives
// compute objects (driver.Leftovers), as Docker's workdir volumes can.
type leftoverDriver struct {
	*fake.Driver
	mu      sync.Mutex
	volumes map[string]bool // sandbox ids with storage
}

func (d *leftoverDriver) Leftovers(_ context.Context, objs []driver.Object) ([]driver.Object, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []driver.Object
	for id := range d.volumes {
		if !slices.ContainsFunc(objs, func(o driver.Object) bool { return o.ID == id }) {
			out = append(out, driver.Object{ID: id, State: driver.StateStopped})
		}
	}
	return out, nil
}

func (d *leftoverDriver) Delete(ctx context.Context, id string) error {
	d.mu.Lock()
	delete(d.volumes, id)
	d.mu.Unlock()
	return d.Driver.Delete(ctx, id)
}

// Storage without a compute object or a record is reported by the doctor
// and collected as an orphan is; a record's storage is neither.
func TestLeftoversAreRemovedAfterGrace(t *testing.T) {
	bubble(t, func(t *testing.T) {
		var drv *leftoverDriver
		h := newHarness(t, func(c *Config) {
			c.OrphanGrace = 50 * time.Millisecond
			drv = &leftoverDriver{Driver: c.Driver.(*fake.Driver), volumes: map[string]bool{}}
			c.Driver = drv
		})
		kept := h.create("kept")
		h.waitPhase("kept", sandbox.PhaseReady)
		stray := sandbox.NewID()
		drv.mu.Lock()
		drv.volumes[stray], drv.volumes[kept.ID] = true, true
		drv.mu.Unlock()
		ctx := context.Background()
		findings, err := h.m.Doctor(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(findings) != 1 || findings[0].Sandbox != stray || !strings.Contains(findings[0].Problem, "storage without") {
			t.Fatalf("doctor: %+v; want one finding, the storage of %s", findings, stray)
		}
		for range 2 {
			if err := h.m.CollectOrphans(ctx); err != nil {
				t.Fatal(err)
			}
			time.Sleep(60 * time.Millisecond) // the grace period passes on the bubble's clock
		}
		drv.mu.Lock()
		defer drv.mu.Unlock()
		if drv.volumes[stray] {
			t.Error("storage without a record survived its grace period")
		}
		if !drv.volumes[kept.ID] {
			t.Error("the storage of a sandbox with a record was removed")
		}
	})
}

// gatewayJournal is the kinds of the gateway journal's entries about
// subject, oldest first, joined with commas.
func (h *harness) gatewayJournal(subject string) string {
	h.t.Helper()
	evs, err := h.st.ListGatewayEvents(context.Background())
	if err != nil {
		h.t.Fatal(err)
	}
	var kinds []string
	for _, ev := range evs {
		if ev.Subject == subject {
			kinds = append(kinds, ev.Kind)
		}
	}
	return strings.Join(kinds, ",")
}

// The grace period runs from the first report in the gateway journal: a
// gateway restarted more often than the grace still removes the orphan,
// and reports it once.
func TestOrphanGraceOutlivesRestarts(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, func(c *Config) { c.OrphanGrace = 50 * time.Millisecond })
		orphan := sandbox.NewID()
		if err := h.drv.Create(context.Background(), driver.Spec{ID: orphan, Name: "stray", Generation: 1}); err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		for range 3 { // 3 × 30 ms: past the grace, but never 50 ms in one gateway's life
			if err := h.m.CollectOrphans(ctx); err != nil {
				t.Fatal(err)
			}
			time.Sleep(30 * time.Millisecond)
			h.restart()
		}
		if err := h.m.CollectOrphans(ctx); err != nil {
			t.Fatal(err)
		}
		if _, ok := h.object(orphan); ok {
			t.Fatal("the orphan survived its grace period because the gateway restarted within it")
		}
		if kinds := h.gatewayJournal(orphan); kinds != "orphan_found,orphan_removed" {
			t.Fatalf("gateway journal for the orphan = %s; want one report, then the removal", kinds)
		}
	})
}

// Another gateway on the same engine and label (a second home, a test
// instance) has objects this one has no record of: they are never
// collected as orphans, and the doctor names their gateway.
func TestAnotherGatewaysObjectsAreLeftAlone(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, func(c *Config) { c.OrphanGrace = 50 * time.Millisecond })
		other, err := fake.New(driver.Config{Label: label, Gateway: "fedcba9876543210", StateDir: h.stateDir}, fake.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
		theirs := sandbox.NewID()
		if err := other.Create(context.Background(), driver.Spec{ID: theirs, Name: "theirs", Generation: 1}); err != nil {
			t.Fatal(err)
		}
		mine := sandbox.NewID()
		if err := h.drv.Create(context.Background(), driver.Spec{ID: mine, Name: "stray", Generation: 1}); err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		for range 3 { // past the grace period, three times
			if err := h.m.CollectOrphans(ctx); err != nil {
				t.Fatal(err)
			}
			time.Sleep(60 * time.Millisecond)
		}
		if _, ok := h.object(theirs); !ok {
			t.Fatal("another gateway's object was removed as an orphan")
		}
		if _, ok := h.object(mine); ok {
			t.Fatal("this gateway's own orphan survived its grace period")
		}
		if kinds := h.gatewayJournal(theirs); kinds != "" {
			t.Errorf("gateway journal for another gateway's object = %q; want nothing", kinds)
		}
		findings, err := h.m.Doctor(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var said bool
		for _, f := range findings {
			said = said || f.Sandbox == theirs && strings.Contains(f.Problem, "another gateway (fedcba9876543210)") && strings.Contains(f.Action, "left alone")
		}
		if !said {
			t.Errorf("doctor findings %+v; want the other gateway's object named and left alone", findings)
		}
	})
}

func TestOrphansAreReportedThenRemovedAfterGrace(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, func(c *Config) { c.OrphanGrace = 50 * time.Millisecond })
		kept := h.create("kept")
		h.waitPhase("kept", sandbox.PhaseReady)
		orphan := sandbox.NewID()
		if err := h.drv.Create(context.Background(), driver.Spec{ID: orphan, Name: "stray", Generation: 1}); err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if err := h.m.CollectOrphans(ctx); err != nil {
			t.Fatal(err)
		}
		if _, ok := h.object(orphan); !ok {
			t.Fatal("an orphan was removed before its grace period")
		}
		time.Sleep(60 * time.Millisecond) // the grace period passes on the bubble's clock
		if err := h.m.CollectOrphans(ctx); err != nil {
			t.Fatal(err)
		}
		if _, ok := h.object(orphan); ok {
			t.Fatal("the orphan survived its grace period")
		}
		if _, ok := h.object(kept.ID); !ok {
			t.Fatal("a sandbox with a record was removed")
		}
		if kinds := h.gatewayJournal(orphan); kinds != "orphan_found,orphan_removed" {
			t.Fatalf("gateway journal for the orphan = %s", kinds)
		}
	})
}
