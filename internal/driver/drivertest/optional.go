package drivertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/testenv"
)

// The optional capabilities (driver.Execer, LogReader, Watcher,
// Validator, and those of capabilities.go): every driver that has one runs its cases; a driver without
// it skips them, saying so.

// DefaultPrintCommand is the main command of the logs case: it prints
// printMarker and keeps running.
var DefaultPrintCommand = []string{"sh", "-c", "echo " + printMarker + "; exec sleep 3600"}

const printMarker = "corral-conformance-output"

func (s *suite) optionalCases() []struct {
	name string
	fn   func(t *testing.T)
} {
	return []struct {
		name string
		fn   func(t *testing.T)
	}{
		{"Exec", s.testExec},
		{"Logs", s.testLogs},
		{"Watch", s.testWatch},
		{"Validate", s.testValidate},
		{"DialPort", s.testDialPort},
		{"AttachEgress", s.testAttachEgress},
		{"Images", s.testImages},
		{"Workdir", s.testWorkdir},
		{"Leftovers", s.testLeftovers},
		{"Tiers", s.testTiers},
		{"Pause", s.testPause},
		{"Seed", s.testSeed},
		{"OpenWorkdir", s.testOpenWorkdir},
	}
}

// testPause: a paused incarnation is StatePaused, stays so when paused
// again, resumes as the same incarnation, and stops and deletes from
// paused; an exec while paused does not run; a missing one is not found.
func (s *suite) testPause(t *testing.T) {
	d := s.driver(t)
	p := capability[driver.Pauser](t, d, "cannot pause")
	spec := d.running(d.spec(1))
	ref := driver.Ref{ID: spec.ID, Generation: 1}
	for range 2 {
		if err := p.Pause(ctx(t), ref); err != nil {
			t.Fatalf("pause: %v", err)
		}
		d.expect(d.inspect(spec.ID), driver.StatePaused, 1)
	}
	if err := p.Resume(ctx(t), ref); err != nil {
		t.Fatalf("resume: %v", err)
	}
	d.expect(d.inspect(spec.ID), driver.StateRunning, 1)
	if ex, ok := d.Driver.(driver.Execer); ok {
		if code, err := ex.Exec(ctx(t), spec.ID, driver.ExecOptions{Command: []string{"true"}, Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}}); err != nil || code != 0 {
			t.Errorf("exec after resume: %d, %v", code, err)
		}
	}
	if err := p.Pause(ctx(t), ref); err != nil {
		t.Fatal(err)
	}
	d.stop(spec.ID, 1)
	d.expect(d.inspect(spec.ID), driver.StateStopped, 1)
	d.start(spec.ID, 1)
	if err := p.Pause(ctx(t), ref); err != nil {
		t.Fatal(err)
	}
	d.delete(spec.ID)
	d.inspectMissing(spec.ID)
	if err := p.Pause(ctx(t), ref); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("pause of a deleted sandbox: %v; want not found", err)
	}
	if err := p.Pause(ctx(t), driver.Ref{ID: sandbox.NewID(), Generation: 1}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("pause of a sandbox that never was: %v; want not found", err)
	}
}

// running starts a sandbox of spec and returns it.
func (d *tdriver) running(spec driver.Spec) driver.Spec {
	d.t.Helper()
	d.create(spec)
	d.start(spec.ID, spec.Generation)
	return spec
}

// capability returns d as a T, or skips the test: d has not that
// capability (what says which).
func capability[T any](t *testing.T, d *tdriver, what string) T {
	t.Helper()
	c, ok := d.Driver.(T)
	if !ok {
		t.Skipf("%s %s", d.Name(), what)
	}
	return c
}

func (s *suite) testExec(t *testing.T) {
	d := s.driver(t)
	ex := capability[driver.Execer](t, d, "has no exec")
	spec := d.running(d.spec(1))
	exec := func(stdin string, command ...string) (int, string, string, error) {
		var out, errOut bytes.Buffer
		opts := driver.ExecOptions{Command: command, Stdout: &out, Stderr: &errOut}
		if stdin != "" {
			opts.Stdin = strings.NewReader(stdin)
		}
		code, err := ex.Exec(ctx(t), spec.ID, opts)
		return code, out.String(), errOut.String(), err
	}
	if code, out, errOut, err := exec("", "echo", "hello", "corral"); err != nil || code != 0 || out != "hello corral\n" {
		t.Errorf("exec echo: %d, %q, %q, %v; want 0 and its output", code, out, errOut, err)
	}
	if code, out, _, err := exec("from stdin\n", "cat"); err != nil || code != 0 || out != "from stdin\n" {
		t.Errorf("exec cat with stdin: %d, %q, %v; want its input back", code, out, err)
	}
	if code, _, _, err := exec("", "/corral/no/such/program"); err != nil || code != 127 {
		t.Errorf("exec of a missing program: %d, %v; want exit code 127", code, err)
	}
	if code, _, _, err := exec("", "false"); err != nil || code != 1 {
		t.Errorf("exec false: %d, %v; want exit code 1", code, err)
	}
	_, err := ex.Exec(ctx(t), sandbox.NewID(), driver.ExecOptions{Command: []string{"true"}, Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}})
	if !errors.Is(err, errdefs.ErrNotFound) && !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("exec in a sandbox that does not exist: %v; want not found or failed precondition", err)
	}
}

func (s *suite) testLogs(t *testing.T) {
	d := s.driver(t)
	lr := capability[driver.LogReader](t, d, "keeps no logs")
	spec := d.spec(1)
	spec.Command = s.opts.PrintCommand
	d.running(spec)
	var out string
	testenv.Eventually(t, CallTimeout, func() error {
		var b bytes.Buffer
		if err := lr.Logs(ctx(t), spec.ID, driver.LogOptions{Tail: 1}, &b, &b); err != nil {
			t.Fatal(err)
		}
		if out = b.String(); !strings.Contains(out, printMarker) {
			return fmt.Errorf("logs: %q; want %q", out, printMarker)
		}
		return nil
	})
	if strings.Count(out, "\n") != 1 {
		t.Errorf("logs --tail 1: %q; want one line", out)
	}
}

func (s *suite) testWatch(t *testing.T) {
	d := s.driver(t)
	w := capability[driver.Watcher](t, d, "cannot be watched")
	spec := d.running(d.spec(1))
	wctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var once sync.Once
	changed := make(chan struct{})
	watching := make(chan error, 1)
	go func() {
		watching <- w.Watch(wctx, func(id string) {
			if id == spec.ID {
				once.Do(func() { close(changed) })
			}
		})
	}()
	// A change made before the watch begins is not its to report: stop
	// and start again until one is reported, a few times at most.
	for i := 0; ; i++ {
		if i%2 == 0 {
			d.stop(spec.ID, 1)
		} else {
			d.start(spec.ID, 1)
		}
		select {
		case <-changed:
			return
		case err := <-watching:
			t.Fatalf("Watch ended before it reported a change: %v", err)
		case <-time.After(2 * time.Second):
			if i == 4 {
				t.Fatalf("Watch reported none of %d stops and starts of %s", i+1, spec.ID)
			}
		}
	}
}

func (s *suite) testValidate(t *testing.T) {
	d := s.driver(t)
	v := capability[driver.Validator](t, d, "validates nothing ahead")
	if err := v.Validate(d.spec(1)); err != nil {
		t.Errorf("Validate of the suite's own spec: %v; want nil", err)
	}
	if s.opts.InvalidImage == "" {
		return
	}
	spec := d.spec(1)
	spec.Image = s.opts.InvalidImage
	if err := v.Validate(spec); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("Validate of image %q: %v; want an invalid argument", spec.Image, err)
	}
}
