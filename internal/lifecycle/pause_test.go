package lifecycle

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/driver/fake/faults"
	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

func kinds(ops []*sandbox.Operation) string {
	var out []string
	for _, op := range ops {
		out = append(out, string(op.Kind))
	}
	return strings.Join(out, " ")
}

// A paused sandbox is frozen by the driver, stays paused across a gateway
// restart (never restarted, the same incarnation), refuses an exec saying
// why, resumes as the same incarnation, and stops and deletes as any other.
func TestPauseAndResume(t *testing.T) {
	h := newHarness(t, nil)
	ctx := context.Background()
	sb := h.create("web")
	h.waitPhase("web", sandbox.PhaseReady)

	if _, err := h.m.Pause(ctx, "web", false); err != nil {
		t.Fatal(err)
	}
	h.waitPhase("web", sandbox.PhasePaused)
	if o, _ := h.object(sb.ID); o.State != driver.StatePaused {
		t.Fatalf("the driver's object is %s, want paused", o.State)
	}
	if _, _, err := h.exec("web", "", "echo", "hi"); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "is paused") {
		t.Errorf("exec in a paused sandbox without auto_resume: %v", err)
	}
	if _, err := h.m.Pause(ctx, "web", false); err != nil {
		t.Errorf("pausing a paused sandbox again: %v", err)
	}

	h.restart()
	got := h.waitPhase("web", sandbox.PhasePaused)
	if o, _ := h.object(sb.ID); o.State != driver.StatePaused || o.Generation != 1 || got.Generation != 1 {
		t.Fatalf("after a restart: object %s generation %d, record generation %d; want paused, 1, 1", o.State, o.Generation, got.Generation)
	}

	if _, err := h.m.Resume(ctx, "web"); err != nil {
		t.Fatal(err)
	}
	got = h.waitPhase("web", sandbox.PhaseReady)
	if o, _ := h.object(sb.ID); o.State != driver.StateRunning || got.Generation != 1 {
		t.Fatalf("after resume: object %s, generation %d; want running, the same incarnation", o.State, got.Generation)
	}
	if code, out, err := h.exec("web", "", "echo", "hi"); err != nil || code != 0 || out != "hi\n" {
		t.Errorf("exec after resume: %d %q %v", code, out, err)
	}
	if _, err := h.m.Resume(ctx, "web"); err != nil {
		t.Errorf("resuming a running sandbox: %v", err)
	}

	// a stop and a delete of a paused sandbox
	h.m.Pause(ctx, "web", false)
	h.waitPhase("web", sandbox.PhasePaused)
	if _, err := h.m.Stop(ctx, "web"); err != nil {
		t.Fatal(err)
	}
	h.waitPhase("web", sandbox.PhaseStopped)
	if _, err := h.m.Pause(ctx, "web", false); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("pausing a stopped sandbox: %v", err)
	}
	h.m.Start(ctx, "web")
	h.waitPhase("web", sandbox.PhaseReady)
	h.m.Pause(ctx, "web", false)
	h.waitPhase("web", sandbox.PhasePaused)
	journal := kinds(h.journal(sb.ID))
	for _, want := range []string{"pause driver.pause", "resume driver.resume", "stop driver.stop"} {
		if !strings.Contains(journal, want) {
			t.Errorf("the journal lacks %q: %s", want, journal)
		}
	}
	if _, err := h.m.Delete(ctx, "web", false); err != nil {
		t.Fatal(err)
	}
	h.waitGone("web")
	if _, found := h.object(sb.ID); found {
		t.Error("the paused sandbox's object outlived its delete")
	}
}

// With lifecycle.auto_resume, an exec into a paused sandbox resumes it
// first; a start of a paused one thaws the same incarnation.
func TestAutoResume(t *testing.T) {
	h := newHarness(t, nil)
	ctx := context.Background()
	sb, _, err := h.m.Create(ctx, "auto", "", sandbox.Spec{Command: []string{"sleep", "1d"}, Policy: "version: 1\nlifecycle:\n  auto_resume: true\n"})
	if err != nil {
		t.Fatal(err)
	}
	h.waitPhase("auto", sandbox.PhaseReady)
	h.m.Pause(ctx, "auto", false)
	h.waitPhase("auto", sandbox.PhasePaused)
	if code, out, err := h.exec("auto", "", "echo", "awake"); err != nil || code != 0 || out != "awake\n" {
		t.Fatalf("exec into a paused sandbox with auto_resume: %d %q %v", code, out, err)
	}
	if got, _ := h.m.Get(ctx, "auto"); got.Phase != sandbox.PhaseReady || got.Generation != sb.Generation {
		t.Errorf("after the exec: %s generation %d", got.Phase, got.Generation)
	}
	h.m.Pause(ctx, "auto", false)
	h.waitPhase("auto", sandbox.PhasePaused)
	if _, err := h.m.Start(ctx, "auto"); err != nil {
		t.Fatal(err)
	}
	if got := h.waitPhase("auto", sandbox.PhaseReady); got.Generation != sb.Generation {
		t.Errorf("a start of a paused sandbox made generation %d; want the same incarnation thawed", got.Generation)
	}
}

// A pause with memory is the driver's PauseMemory, journaled as one; it
// is kept across a gateway restart and ends with the resume. A sandbox
// whose policy cannot be checkpointed, or one frozen in place, is refused
// saying why.
func TestPauseMemory(t *testing.T) {
	h := newHarness(t, nil)
	ctx := context.Background()
	const checkpointable = "version: 1\nisolation: gvisor\nlifecycle: {memory_snapshots: true}\n"
	sb := h.createWithPolicy("mem", checkpointable)
	h.createWithPolicy("plain", "version: 1\nisolation: gvisor\n")
	h.createWithPolicy("frozen", checkpointable)
	for _, name := range []string{"mem", "plain", "frozen"} {
		h.waitPhase(name, sandbox.PhaseReady)
	}

	// the fault is on the memory pause alone: a freeze would not meet it
	h.faults(faults.Rule{Op: "pause-memory", Action: "fail", Error: "no checkpoint today"})
	if _, err := h.m.Pause(ctx, "mem", true); err != nil {
		t.Fatal(err)
	}
	h.waitFor("the memory pause to fail", func() bool {
		got, _ := h.m.Get(ctx, "mem")
		return strings.Contains(got.Reason, "no checkpoint today")
	})
	h.faults()
	got := h.waitPhase("mem", sandbox.PhasePaused)
	if !got.PauseMemory {
		t.Error("a sandbox paused with memory does not say so")
	}
	if _, err := h.m.Pause(ctx, "mem", false); err != nil {
		t.Errorf("a plain pause of a sandbox paused with memory: %v; want no change", err)
	}
	h.restart()
	if got := h.waitPhase("mem", sandbox.PhasePaused); !got.PauseMemory || got.Generation != 1 {
		t.Errorf("after a restart: pause_memory %v, generation %d; want true, 1", got.PauseMemory, got.Generation)
	}
	if _, err := h.m.Resume(ctx, "mem"); err != nil {
		t.Fatal(err)
	}
	if got := h.waitPhase("mem", sandbox.PhaseReady); got.PauseMemory || got.Generation != 1 {
		t.Errorf("after its resume: pause_memory %v, generation %d; want false, the same incarnation", got.PauseMemory, got.Generation)
	}
	var pause, call *sandbox.Operation
	for _, op := range h.journal(sb.ID) {
		switch op.Kind {
		case sandbox.OpPause:
			pause = op
		case sandbox.OpDriverPause:
			call = op
		}
	}
	if pause == nil || call == nil || !strings.Contains(pause.Detail, "memory") || !strings.Contains(call.Detail, "memory") {
		t.Errorf("the journal's pause %+v and driver call %+v do not say memory", pause, call)
	}

	if _, err := h.m.Pause(ctx, "plain", true); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "memory_snapshots") {
		t.Errorf("a pause with memory of a sandbox without lifecycle.memory_snapshots: %v; want FailedPrecondition naming it", err)
	}
	h.m.Pause(ctx, "frozen", false)
	h.waitPhase("frozen", sandbox.PhasePaused)
	if _, err := h.m.Pause(ctx, "frozen", true); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "resume it first") {
		t.Errorf("a pause with memory of a frozen sandbox: %v; want FailedPrecondition saying to resume it first", err)
	}
}
