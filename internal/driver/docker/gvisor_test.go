package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/driver/drivertest"
	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/policy"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/testenv"
)

// newGVisorDriver is a test driver on an engine that has the gVisor
// runtime; without one the test skips, or fails under
// CORRAL_REQUIRE_DOCKER=1 (.ci/run gives the engine one).
func newGVisorDriver(t *testing.T, label string) *Driver {
	t.Helper()
	d := newTestDriver(t, label)
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := d.gvisorRuntime(c); err != nil {
		if os.Getenv("CORRAL_REQUIRE_DOCKER") == "1" {
			t.Fatalf("CORRAL_REQUIRE_DOCKER=1 but %v", err)
		}
		t.Skipf("needs the engine's gVisor runtime: %v", err)
	}
	return d
}

func TestGVisorConformance(t *testing.T) {
	testenv.RequireDocker(t)
	drivertest.RunWith(t, func(t *testing.T, label string) driver.Driver { return newGVisorDriver(t, label) },
		drivertest.Options{Image: testenv.TestImage, PullImage: pullableImage(t), InvalidImage: "Bad?Ref", Isolation: policy.IsolationGVisor})
}

// The policy cases on Docker + gVisor: the same outcomes as on the
// namespaces tier, but for what gVisor cannot enforce the same way
// (drivertest.Unenforced, and the memory limit: TestGVisorMemoryLimit).
func TestGVisorPolicyCases(t *testing.T) {
	d := newGVisorDriver(t, "corral.test."+sandbox.ShortID(sandbox.NewID()))
	s := policySandbox(t, d, drivertest.GVisorPolicy("/.corral/bin"))
	s.FileListsUnenforced, s.MemoryEndsSandbox = true, true // TestGVisorMemoryLimit allocates past it
	drivertest.RunPolicyCases(t, s)
}

// Inside the gVisor tier the kernel is gVisor's, and a system call the
// host's kernel has but gVisor lacks fails with ENOSYS, the sandbox
// running on.
func TestGVisorKernel(t *testing.T) {
	d := newGVisorDriver(t, "corral.test."+sandbox.ShortID(sandbox.NewID()))
	// dmesg needs syslog(2), which the default seccomp filter refuses.
	id := startPolicySandbox(t, d, "gvisor-kernel", "version: 1\nisolation: gvisor\nprocess: {seccomp: unconfined}\n")
	if code, out, errOut := execIn(t, d, id, "dmesg"); code != 0 || !strings.Contains(out, "Starting gVisor") {
		t.Errorf("dmesg: exit %d, %q %q; want gVisor's kernel", code, out, errOut)
	}
	if code, out, errOut := execIn(t, d, id, supervisorPath, "supervise", "probe", "landlock"); code != 0 || !strings.Contains(out, "landlock: ENOSYS") {
		t.Errorf("landlock_create_ruleset: exit %d, %q %q; want ENOSYS from gVisor", code, out, errOut)
	}
	if code, out, _ := execIn(t, d, id, "echo", "still here"); code != 0 || out != "still here\n" {
		t.Errorf("after the missing system call: exit %d, %q", code, out)
	}
	obj, err := d.Inspect(context.Background(), id)
	if err != nil || !strings.Contains(obj.Protections, "gVisor (runtime runsc") {
		t.Errorf("protections %q, %v; want the gVisor tier named", obj.Protections, err)
	}
}

// A gVisor sandbox on an engine without the runtime is refused at once,
// before anything is made, naming what is missing.
func TestGVisorWithoutTheRuntimeIsRefused(t *testing.T) {
	testenv.RequireDocker(t)
	d, err := New(driver.Config{Label: "corral.test." + sandbox.ShortID(sandbox.NewID()), StateDir: stateDir(t)},
		Options{PullPolicy: "never", Supervisor: testenv.SupervisorOf(corralBin), GVisorRuntime: "corral-no-such-runtime"})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	spec := driver.Spec{ID: sandbox.NewID(), Name: "nogvisor", Generation: 1, Image: testenv.TestImage, Command: []string{"sleep", "10"},
		Policy: drivertest.MustPolicy(t, "version: 1\nisolation: gvisor\n")}
	err = d.Validate(spec)
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), `"corral-no-such-runtime" runtime`) || !strings.Contains(err.Error(), "runc") {
		t.Errorf("Validate = %v; want it refused, naming the runtime and those the engine has", err)
	}
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := d.Create(c, spec); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("Create = %v; want it refused", err)
	}
	if _, err := d.Inspect(c, spec.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("after a refused create: Inspect = %v; want nothing made", err)
	}
	tiers := d.Tiers(c)
	if len(tiers) != 2 || !tiers[0].Available || tiers[1].Available || !strings.Contains(tiers[1].Detail, "corral-no-such-runtime") {
		t.Errorf("tiers = %+v; want namespaces available, gvisor not, saying why", tiers)
	}
}

func TestHostNetworkArgs(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{nil, false},
		{[]string{"--network=none"}, false},
		{[]string{"--network=host"}, true},
		{[]string{"-network=host"}, true},
		{[]string{"--network", "host"}, true},
		{[]string{"--network=host", "--network=none"}, false},
		{[]string{"--debug-log=/x/network=host"}, false},
		{[]string{"network=host"}, false},
	} {
		if got := hostNetwork(tc.args); got != tc.want {
			t.Errorf("hostNetwork(%q) = %v, want %v", tc.args, got, tc.want)
		}
	}
}

// On the gVisor tier the memory limit holds gVisor's kernel and every
// process: going past it kills the whole sandbox, which the driver reports
// stopped, out of memory (drivertest's MemoryEndsSandbox).
func TestGVisorMemoryLimit(t *testing.T) {
	d := newGVisorDriver(t, "corral.test."+sandbox.ShortID(sandbox.NewID()))
	id := startPolicySandbox(t, d, "gvisor-memory", "version: 1\nisolation: gvisor\nlimits: {memory: 64Mi}\n")
	if code, out, _ := execIn(t, d, id, "sh", "-c", "dd if=/dev/zero of=/dev/null bs=16M count=1 && echo fits"); code != 0 || !strings.Contains(out, "fits") {
		t.Fatalf("an allocation under the limit: exit %d, %q", code, out)
	}
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	go d.Exec(c, id, driver.ExecOptions{Command: []string{"dd", "if=/dev/zero", "of=/dev/null", "bs=256M", "count=1"}, Stdout: io.Discard, Stderr: io.Discard}) // may not return: see above
	var obj driver.Object
	testenv.Eventually(t, 30*time.Second, func() error {
		var err error
		if obj, err = d.Inspect(context.Background(), id); err == nil && obj.State != driver.StateStopped {
			err = fmt.Errorf("the sandbox past its memory limit is %s", obj.State)
		}
		return err
	})
	if !strings.Contains(obj.Message, "out of memory") {
		t.Errorf("stopped sandbox: %+v; want it said killed out of memory", obj)
	}
}

// Landlock as a hard requirement cannot hold inside gVisor: refused at
// once, before the engine is asked anything.
func TestGVisorRefusesLandlockHardRequirement(t *testing.T) {
	d := newTestDriver(t, "corral.test."+sandbox.ShortID(sandbox.NewID()))
	spec := driver.Spec{ID: sandbox.NewID(), Name: "hard", Generation: 1, Image: testenv.TestImage, Command: []string{"sleep", "10"},
		Policy: drivertest.MustPolicy(t, drivertest.Policy("/.corral/bin")+"isolation: gvisor\n")}
	if err := d.Validate(spec); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "gVisor has no Landlock") {
		t.Errorf("Validate = %v; want it refused, saying why", err)
	}
}

// An exec on a terminal, on the namespaces tier and on gVisor's, typed
// into as a user would (input open until the answer came). On gVisor the
// process does not see a terminal (isatty is false: runsc hands it the
// engine's console as a host file, as `docker run -it --runtime=runsc`
// shows), but what it prints goes through one.
func TestExecTerminal(t *testing.T) {
	t.Run("namespaces", func(t *testing.T) {
		d := newTestDriver(t, "corral.test."+sandbox.ShortID(sandbox.NewID()))
		execOnTerminal(t, d, startPolicySandbox(t, d, "tty", "version: 1\n"), "/dev/pts/")
	})
	t.Run("gvisor", func(t *testing.T) {
		d := newGVisorDriver(t, "corral.test."+sandbox.ShortID(sandbox.NewID()))
		execOnTerminal(t, d, startPolicySandbox(t, d, "tty", "version: 1\nisolation: gvisor\n"), "not a tty")
	})
}

func execOnTerminal(t *testing.T, d *Driver, id, tty string) {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	in, typing := io.Pipe()
	defer typing.Close()
	out := &testenv.SyncBuffer{}
	done := make(chan error, 1)
	var code int
	go func() {
		var err error
		code, err = d.Exec(c, id, driver.ExecOptions{Command: []string{"sh", "-c", "tty; read line; echo got $line; exit 5"},
			TTY: true, Size: driver.TerminalSize{Rows: 30, Cols: 100}, Stdin: in, Stdout: out})
		done <- err
	}()
	testenv.Eventually(t, 30*time.Second, func() error {
		if !strings.Contains(out.String(), tty) {
			return fmt.Errorf("the terminal shows %q, want %q", out.String(), tty)
		}
		return nil
	})
	if _, err := typing.Write([]byte("hello\r")); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := out.String(); code != 5 || !strings.Contains(got, "got hello\r\n") {
		t.Errorf("exec on a terminal: exit %d, %q; want exit 5 and the typed line echoed back through a terminal (CR LF)", code, got)
	}
}

// File lists on Docker's gVisor tier, which cannot enforce them, are
// refused unless the policy says best_effort itself: a create never runs
// them silently unenforced.
func TestGVisorRefusesUnenforcedFileListsUnlessAsked(t *testing.T) {
	d := newTestDriver(t, "corral.test."+sandbox.ShortID(sandbox.NewID()))
	spec := driver.Spec{ID: sandbox.NewID(), Name: "lists", Generation: 1, Image: testenv.TestImage, Command: []string{"sleep", "10"},
		Policy: drivertest.MustPolicy(t, "version: 1\nisolation: gvisor\nfilesystem_policy: {read_only: [/bin]}\n")}
	if err := d.Validate(spec); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "not enforced") {
		t.Errorf("Validate = %v; want file lists left to the default refused, saying they would not be enforced", err)
	}
	spec.Policy = drivertest.MustPolicy(t, "version: 1\nisolation: gvisor\nfilesystem_policy: {read_only: [/bin]}\nlandlock: {compatibility: best_effort}\n")
	if err := d.Validate(spec); err != nil && strings.Contains(err.Error(), "Landlock") {
		t.Errorf("Validate with best_effort said = %v; want it accepted", err)
	}
}
