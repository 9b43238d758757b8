package lifecycle

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/driver/fake/faults"
	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

// exec runs a command in a sandbox through the manager.
func (h *harness) exec(name string, stdin string, command ...string) (int, string, error) {
	h.t.Helper()
	var out, errOut bytes.Buffer
	opts := driver.ExecOptions{Command: command, Stdout: &out, Stderr: &errOut}
	if stdin != "" {
		opts.Stdin = strings.NewReader(stdin)
	}
	code, err := h.m.Exec(context.Background(), name, opts)
	return code, out.String() + errOut.String(), err
}

// The exec path: a ready sandbox runs the command through the driver, its
// exit code and output come back; a sandbox that is not ready, a missing
// one and a bad command are refused before the driver is asked.
func TestExecPath(t *testing.T) {
	h := newHarness(t, nil)
	h.create("web")
	h.waitPhase("web", sandbox.PhaseReady)
	if code, out, err := h.exec("web", "", "echo", "hi"); err != nil || code != 0 || out != "hi\n" {
		t.Errorf("exec echo hi: %d, %q, %v", code, out, err)
	}
	if code, out, err := h.exec("web", "piped\n", "cat"); err != nil || code != 0 || out != "piped\n" {
		t.Errorf("exec cat: %d, %q, %v", code, out, err)
	}
	if code, _, err := h.exec("web", "", "exit", "3"); err != nil || code != 3 {
		t.Errorf("exec exit 3: %d, %v; want the command's exit code", code, err)
	}
	if _, _, err := h.exec("nosuch", "", "true"); !errors.Is(err, errdefs.ErrNotFound) || !strings.Contains(err.Error(), "nosuch") {
		t.Errorf("exec in a sandbox that does not exist: %v; want not found, naming it", err)
	}
	if _, _, err := h.exec("web", "", "bad\x00arg"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("exec with NUL: %v; want invalid argument", err)
	}
	h.faults(faults.Rule{Op: "exec", Action: "fail", Error: "engine gone"})
	if _, _, err := h.exec("web", "", "true"); err == nil || !strings.Contains(err.Error(), "engine gone") {
		t.Errorf("exec when the driver fails: %v; want its error", err)
	}
	h.faults()
	if _, err := h.m.Stop(context.Background(), "web"); err != nil {
		t.Fatal(err)
	}
	h.waitPhase("web", sandbox.PhaseStopped)
	if _, _, err := h.exec("web", "", "true"); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("exec in a stopped sandbox: %v; want failed precondition", err)
	}
}

// Logs come from the driver for the sandbox named.
func TestLogsPath(t *testing.T) {
	h := newHarness(t, nil)
	if _, _, err := h.m.Create(context.Background(), "printer", "", sandbox.Spec{Command: []string{"echo", "printed"}}); err != nil {
		t.Fatal(err)
	}
	h.waitPhase("printer", sandbox.PhaseReady)
	var out bytes.Buffer
	if err := h.m.Logs(context.Background(), "printer", driver.LogOptions{}, &out, &out); err != nil || out.String() != "printed\n" {
		t.Errorf("logs: %q, %v; want what the main command printed", out.String(), err)
	}
	if err := h.m.Logs(context.Background(), "nosuch", driver.LogOptions{}, &out, &out); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("logs of a sandbox that does not exist: %v", err)
	}
}
