package native

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/internal/cgroups"
	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/driver/drivertest"
	"github.com/corral-sandbox/corral/internal/driver/native/shim"
	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/images"
	"github.com/corral-sandbox/corral/internal/policy"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/supervisor"
	"github.com/corral-sandbox/corral/internal/testenv"
)

// corral is a freshly built corral, run by the supervisors.
var corral string

func TestMain(m *testing.M) { testenv.MainWithCorral(m, &corral) }

// stateDirs gives the drivers of one test one state directory, as the
// conformance suite asks.
var stateDirs sync.Map // *testing.T -> string

func newTestDriver(t *testing.T, label string) *Driver {
	t.Helper()
	return newDriverWith(t, label, Options{Supervisor: testenv.SupervisorOf(corral)})
}

func newDriverWith(t *testing.T, label string, opts Options) *Driver {
	t.Helper()
	testenv.RequireRoot(t)
	dir, _ := stateDirs.LoadOrStore(t, t.TempDir())
	d, err := New(driver.Config{Label: label, StateDir: dir.(string)}, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() }) // its standby supervisor goes
	return d
}

// newImageDriver is a test driver with an image cache of its own (which
// never asks a Docker engine).
func newImageDriver(t *testing.T, label string) *Driver {
	t.Helper()
	cacheDir, _ := stateDirs.LoadOrStore(t.Name()+"/images", t.TempDir())
	cache, err := images.Open(cacheDir.(string), images.Options{NoEngine: true})
	if err != nil {
		t.Fatal(err)
	}
	return newDriverWith(t, label, Options{Supervisor: testenv.SupervisorOf(corral), Images: cache})
}

func TestConformance(t *testing.T) {
	testenv.RequireRoot(t)
	drivertest.RunWith(t, func(t *testing.T, label string) driver.Driver { return newTestDriver(t, label) },
		drivertest.Options{Image: HostImage, InvalidImage: "relative/root"})
}

// TestConformanceOCIImage runs the suite on an OCI image (the test image,
// a `docker save` archive) instead of the host's operating system.
func TestConformanceOCIImage(t *testing.T) {
	testenv.RequireRoot(t)
	img, err := testenv.TestOCIImage(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	drivertest.RunWith(t, func(t *testing.T, label string) driver.Driver { return newImageDriver(t, label) },
		drivertest.Options{Image: "docker-archive:" + img.DockerArchive, InvalidImage: "oci:/does/not/exist"})
}

// testSandbox is a running sandbox of a test, deleted when it ends.
type testSandbox struct {
	t   *testing.T
	d   *Driver
	id  string
	gen int64
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func startSandbox(t *testing.T, d *Driver, name, policy string, command ...string) *testSandbox {
	t.Helper()
	return startSandboxOf(t, d, HostImage, name, policy, command...)
}

// startSandboxOf starts a sandbox of image.
func startSandboxOf(t *testing.T, d *Driver, image, name, policy string, command ...string) *testSandbox {
	t.Helper()
	if len(command) == 0 {
		command = []string{"sleep", "3600"}
	}
	s := &testSandbox{t: t, d: d, id: sandbox.NewID(), gen: 1}
	t.Cleanup(func() {
		if err := d.Delete(context.Background(), s.id); err != nil {
			t.Errorf("delete: %v", err)
		}
	})
	spec := driver.Spec{ID: s.id, Name: name, Generation: 1, Image: image, Command: command, Policy: drivertest.MustPolicy(t, policy)}
	if err := d.Create(ctx(t), spec); err != nil {
		t.Fatal(err)
	}
	if err := d.Start(ctx(t), driver.Ref{ID: s.id, Generation: 1}); err != nil {
		t.Fatal(err)
	}
	return s
}

// exec runs a command in the sandbox and returns its exit code and output.
func (s *testSandbox) exec(command ...string) (int, string, string) {
	s.t.Helper()
	var stdout, stderr bytes.Buffer
	code, err := s.d.Exec(ctx(s.t), s.id, driver.ExecOptions{Command: command, Stdout: &stdout, Stderr: &stderr})
	if err != nil {
		s.t.Fatalf("exec %v: %v", command, err)
	}
	return code, stdout.String(), stderr.String()
}

func (s *testSandbox) mustExec(command ...string) string {
	s.t.Helper()
	code, out, errOut := s.exec(command...)
	if code != 0 {
		s.t.Fatalf("exec %v: exit %d, stderr %q", command, code, errOut)
	}
	return out
}

func TestIsolation(t *testing.T) {
	d := newTestDriver(t, "corral.test")
	home := t.TempDir() // stands for the gateway's home, to be hidden
	if err := os.WriteFile(filepath.Join(home, "secret.key"), []byte("key"), 0o600); err != nil {
		t.Fatal(err)
	}
	d.opts.Hide = []string{home}
	s := startSandbox(t, d, "isolated", "")

	t.Run("processes", func(t *testing.T) {
		out := s.mustExec("ps", "-e", "-o", "pid=,ppid=,comm=")
		var pids []string
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			// The next exec's stage, started ahead by the supervisor: a
			// child of pid 1 still named after the supervisor's binary
			// until it names itself.
			f := strings.Fields(line)
			stage := f[2] == "corral-spare" || f[2] == "exe" || f[0] != "1" && f[1] == "1" && f[2] == "corral-supervis"
			if !stage {
				pids = append(pids, f[0])
			}
		}
		// the supervisor, sleep, ps: nothing of the host
		if len(pids) != 3 || pids[0] != "1" {
			t.Errorf("ps in the sandbox shows %q; want only its supervisor (pid 1), its main process, ps and a spare exec stage", out)
		}
	})
	t.Run("hostname", func(t *testing.T) {
		if got := strings.TrimSpace(s.mustExec("hostname")); got != "isolated" {
			t.Errorf("hostname = %q, want the sandbox's name", got)
		}
		host, _ := os.Hostname()
		if host == "isolated" {
			t.Errorf("the host's hostname changed to the sandbox's")
		}
	})
	t.Run("network", func(t *testing.T) {
		var ifaces []string
		for _, line := range strings.Split(s.mustExec("cat", "/proc/net/dev"), "\n")[2:] {
			if name, _, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
				ifaces = append(ifaces, name)
			}
		}
		if len(ifaces) != 1 || ifaces[0] != "lo" {
			t.Errorf("interfaces in the sandbox: %v, want only lo", ifaces)
		}
	})
	t.Run("writes", func(t *testing.T) {
		for _, path := range []string{"/etc/corral-test", "/usr/corral-test", "/corral-test", "/dev/corral-test"} {
			code, _, errOut := s.exec("sh", "-c", "echo x > "+path)
			if code == 0 || !strings.Contains(errOut, "Read-only file system") {
				t.Errorf("writing %s: exit %d, %q; want it refused as a read-only file system", path, code, errOut)
			}
		}
		for _, path := range []string{"/sandbox/f", "/tmp/f"} {
			s.mustExec("sh", "-c", "echo x > "+path)
		}
		if _, err := os.Stat("/tmp/f"); err == nil {
			t.Errorf("the sandbox's /tmp is the host's")
		}
		if data, err := os.ReadFile(filepath.Join(s.d.workdir(s.id), "f")); err != nil || string(data) != "x\n" {
			t.Errorf("the workdir on the host holds %q, %v; want what the sandbox wrote to /sandbox", data, err)
		}
	})
	t.Run("capabilities", func(t *testing.T) {
		for _, cmd := range []string{
			"mount -o remount,rw /etc && echo x > /etc/corral-test",
			"mount -t tmpfs none /mnt",
			"mknod /tmp/disk b 8 0",
			"echo 1 > /proc/sys/vm/drop_caches",
		} {
			if code, out, _ := s.exec("sh", "-c", cmd); code == 0 {
				t.Errorf("%q succeeded in the sandbox (%q)", cmd, out)
			}
		}
		var bnd uint64
		for _, line := range strings.Split(s.mustExec("cat", "/proc/self/status"), "\n") {
			if v, ok := strings.CutPrefix(line, "CapBnd:"); ok {
				bnd, _ = strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			}
		}
		if want := supervisor.KeptCapabilities(); bnd != want {
			t.Errorf("bounding set in the sandbox %#x, want %#x", bnd, want)
		}
	})
	t.Run("hidden", func(t *testing.T) {
		if code, _, _ := s.exec("cat", filepath.Join(home, "secret.key")); code == 0 {
			t.Errorf("the sandbox reads a file of the gateway's home")
		}
	})
	t.Run("proc", func(t *testing.T) {
		if code, _, _ := s.exec("sh", "-c", "echo 1 > /proc/sys/kernel/ns_last_pid"); code == 0 {
			t.Errorf("the sandbox writes to /proc/sys")
		}
	})
}

func TestLimits(t *testing.T) {
	d := newTestDriver(t, "corral.test")
	s := startSandbox(t, d, "limited", "version: 1\nlimits: {memory: 64Mi, pids: 20}\n")
	s.mustExec("dd", "if=/dev/zero", "of=/dev/null", "bs=8M", "count=1")
	if code, _, _ := s.exec("dd", "if=/dev/zero", "of=/dev/null", "bs=256M", "count=1"); code != 128+int(syscall.SIGKILL) {
		t.Errorf("allocating 256 MiB under a memory limit of 64 MiB: exit %d, want %d (killed)", code, 128+int(syscall.SIGKILL))
	}
	code, _, errOut := s.exec("sh", "-c", "for i in $(seq 40); do sleep 100 >/dev/null 2>&1 & done")
	if code == 0 || !strings.Contains(errOut, "fork") {
		t.Errorf("40 processes under a pids limit of 20: exit %d, %q; want fork to fail", code, errOut)
	}
	// An exec into the sandbox at its limit is refused in one line, not
	// with the Go runtime's crash of an exec stage without a thread.
	var stdout, stderr bytes.Buffer
	_, err := d.Exec(ctx(t), s.id, driver.ExecOptions{Command: []string{"echo", "hi"}, Stdout: &stdout, Stderr: &stderr})
	if err == nil || !strings.Contains(err.Error(), "pids limit") || strings.Contains(stderr.String(), "goroutine") {
		t.Errorf("an exec at the pids limit: %v, stderr %q; want it refused in a line naming the limit", err, stderr.String())
	}
	// The supervisor is outside the sandbox's limits: it still stops it.
	if err := d.Stop(ctx(t), driver.Ref{ID: s.id, Generation: 1}, driver.StopOptions{Timeout: 5 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if obj, err := d.Inspect(ctx(t), s.id); err != nil || obj.State != driver.StateStopped {
		t.Errorf("after a stop with its pids exhausted: %+v, %v; want stopped", obj, err)
	}
}

// supervisors counts the live supervisor processes of a state directory.
func supervisors(t *testing.T, stateDir string) int {
	t.Helper()
	pids, err := testenv.Supervisors(stateDir)
	if err != nil {
		t.Fatal(err)
	}
	return len(pids)
}

// TestRapidStopStart stops and starts one sandbox 500 times without a
// pause, each start a new generation, as the gateway does.
func TestRapidStopStart(t *testing.T) {
	d := newTestDriver(t, "corral.test")
	s := startSandbox(t, d, "rapid", "")
	for gen := int64(2); gen <= 501; gen++ {
		if err := d.Stop(ctx(t), driver.Ref{ID: s.id, Generation: gen - 1}, driver.StopOptions{Timeout: 10 * time.Second}); err != nil {
			t.Fatalf("stop of generation %d: %v", gen-1, err)
		}
		spec := driver.Spec{ID: s.id, Name: "rapid", Generation: gen, Image: HostImage, Command: []string{"sleep", "3600"}, Policy: policy.Default()}
		if err := d.Create(ctx(t), spec); err != nil {
			t.Fatalf("create of generation %d: %v", gen, err)
		}
		if err := d.Start(ctx(t), driver.Ref{ID: s.id, Generation: gen}); err != nil {
			t.Fatalf("start of generation %d: %v", gen, err)
		}
	}
	obj, err := d.Inspect(ctx(t), s.id)
	if err != nil || obj.State != driver.StateRunning || obj.Generation != 501 {
		t.Fatalf("after 500 stop/start: %+v, %v; want generation 501 running", obj, err)
	}
	if n := supervisors(t, d.cfg.StateDir); n != 1 {
		t.Errorf("%d supervisor processes run after 500 stop/start; want 1", n)
	}
	if gens := d.generations(s.id); len(gens) != 1 || gens[0] != 501 {
		t.Errorf("bundles left: generations %v, want only 501", gens)
	}
}

func TestSupervisorKilled(t *testing.T) {
	d := newTestDriver(t, "corral.test")
	s := startSandbox(t, d, "killed", "")
	pid, err := readPID(d.bundle(s.id, 1))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if !waitGone(ctx(t), d.bundle(s.id, 1), time.Now().Add(10*time.Second)) {
		t.Fatal("the killed supervisor still holds its lock")
	}
	obj, err := d.Inspect(ctx(t), s.id)
	if err != nil || obj.State != driver.StateFailed || !strings.Contains(obj.Message, "killed") {
		t.Fatalf("after SIGKILL of the supervisor: %+v, %v; want state failed with a reason", obj, err)
	}
	if n := supervisors(t, d.cfg.StateDir); n != 0 {
		t.Errorf("%d supervisors run after the only one was killed", n)
	}
	// A new incarnation starts.
	if err := d.Create(ctx(t), driver.Spec{ID: s.id, Name: "killed", Generation: 2, Image: HostImage, Command: []string{"sleep", "3600"}, Policy: policy.Default()}); err != nil {
		t.Fatal(err)
	}
	if err := d.Start(ctx(t), driver.Ref{ID: s.id, Generation: 2}); err != nil {
		t.Fatal(err)
	}
	s.mustExec("true")
}

func TestMainProcessExit(t *testing.T) {
	d := newTestDriver(t, "corral.test")
	s := startSandbox(t, d, "exits", "", "sh", "-c", "echo out; echo err >&2; exit 3")
	if !waitGone(ctx(t), d.bundle(s.id, 1), time.Now().Add(10*time.Second)) {
		t.Fatal("the supervisor did not exit after its main process")
	}
	obj, err := d.Inspect(ctx(t), s.id)
	if err != nil || obj.State != driver.StateStopped || obj.ExitCode != 3 {
		t.Fatalf("after the main process exited with 3: %+v, %v", obj, err)
	}
	var stdout, stderr bytes.Buffer
	if err := d.Logs(ctx(t), s.id, driver.LogOptions{}, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	if stdout.String() != "out\n" || stderr.String() != "err\n" {
		t.Errorf("logs: stdout %q, stderr %q", stdout.String(), stderr.String())
	}
	if _, err := d.Exec(ctx(t), s.id, driver.ExecOptions{Command: []string{"true"}, Stdout: &stdout, Stderr: &stderr}); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("exec into a stopped sandbox = %v, want errdefs.ErrFailedPrecondition", err)
	}
}

func TestBadInput(t *testing.T) {
	d := newTestDriver(t, "corral.test")
	for _, tc := range []struct {
		spec driver.Spec
		want string
	}{
		{driver.Spec{Image: "busybox:latest", Command: []string{"true"}}, "has no image cache"},
		{driver.Spec{Image: "/does/not/exist", Command: []string{"true"}}, "not a directory"},
		{driver.Spec{Image: HostImage}, "no command"},
	} {
		tc.spec.ID, tc.spec.Name, tc.spec.Generation = sandbox.NewID(), "bad", 1
		err := d.Create(ctx(t), tc.spec)
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Create(%+v) = %v; want an invalid argument that says %q", tc.spec, err, tc.want)
		}
		if _, err := d.Inspect(ctx(t), tc.spec.ID); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("a refused create left an object: %v", err)
		}
	}
	// A command that does not exist: the start fails and says why, and
	// the incarnation stays created.
	s := &testSandbox{t: t, d: d, id: sandbox.NewID()}
	t.Cleanup(func() { _ = d.Delete(context.Background(), s.id) })
	if err := d.Create(ctx(t), driver.Spec{ID: s.id, Name: "nocmd", Generation: 1, Image: HostImage, Command: []string{"/no/such/command"}, Policy: policy.Default()}); err != nil {
		t.Fatal(err)
	}
	err := d.Start(ctx(t), driver.Ref{ID: s.id, Generation: 1})
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "/no/such/command") {
		t.Errorf("start of a missing command = %v; want an invalid argument that names it", err)
	}
	if obj, _ := d.Inspect(ctx(t), s.id); obj.State != driver.StateCreated {
		t.Errorf("after a failed start: %+v, want created", obj)
	}
}

func TestControlSocketPathTooLongForSockaddr(t *testing.T) {
	testenv.RequireRoot(t)
	deep := filepath.Join(t.TempDir(), strings.Repeat("d", 60), strings.Repeat("e", 60))
	d, err := New(driver.Config{Label: "corral.test", StateDir: deep}, Options{Supervisor: testenv.SupervisorOf(corral)})
	if err != nil {
		t.Fatal(err)
	}
	s := startSandbox(t, d, "deep", "")
	if len(d.socket(s.id, 1)) <= 108 {
		t.Fatalf("socket path %d bytes long: the test needs one longer than a sockaddr_un holds", len(d.socket(s.id, 1)))
	}
	s.mustExec("true")
	if err := d.Stop(ctx(t), driver.Ref{ID: s.id, Generation: 1}, driver.StopOptions{Timeout: time.Second}); err != nil {
		t.Fatal(err)
	}
	if live, _ := shim.Alive(d.bundle(s.id, 1).Path(shim.LockFile)); live {
		t.Errorf("the supervisor lives after Stop")
	}
}

// BenchmarkCreateStart times the driver's create and start to a running
// main process, without the gateway.
func BenchmarkCreateStart(b *testing.B) {
	benchmarkCreateStart(b, policy.Default())
}

// benchmarkCreateStart times create and start of sandboxes of pol.
func benchmarkCreateStart(b *testing.B, pol policy.Policy) {
	testenv.RequireRoot(b)
	d, err := New(driver.Config{Label: "corral.bench", StateDir: b.TempDir()}, Options{Supervisor: testenv.SupervisorOf(corral)})
	if err != nil {
		b.Fatal(err)
	}
	c := context.Background()
	for b.Loop() {
		id := sandbox.NewID()
		if err := d.Create(c, driver.Spec{ID: id, Name: "bench", Generation: 1, Image: HostImage, Command: []string{"sleep", "100"}, Policy: pol}); err != nil {
			b.Fatal(err)
		}
		if err := d.Start(c, driver.Ref{ID: id, Generation: 1}); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := d.Delete(c, id); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

func TestExecTerminal(t *testing.T) {
	testExecTerminal(t, "", "/dev/pts/0")
}

// testExecTerminal runs commands on a terminal in a sandbox of policy,
// where tty(1) says ttyName of it.
func testExecTerminal(t *testing.T, policy, ttyName string) {
	d := newTestDriver(t, "corral.test")
	s := startSandbox(t, d, "tty", policy)
	var out bytes.Buffer
	code, err := d.Exec(ctx(t), s.id, driver.ExecOptions{Command: []string{"sh", "-c", "tty; stty size; echo $TERM; exit 5"},
		TTY: true, Size: driver.TerminalSize{Rows: 30, Cols: 100}, Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	// the terminal is the sandbox's own, of its size
	if want := ttyName + "\r\n30 100\r\nxterm\r\n"; code != 5 || out.String() != want {
		t.Errorf("exec on a terminal: exit %d, %q; want exit 5, %q", code, out.String(), want)
	}
	// stdin reaches the command through the terminal
	out.Reset()
	code, err = d.Exec(ctx(t), s.id, driver.ExecOptions{Command: []string{"sh", "-c", "read line; echo got $line"},
		TTY: true, Stdin: strings.NewReader("hello\n"), Stdout: &out})
	if err != nil || code != 0 || !strings.Contains(out.String(), "got hello") {
		t.Errorf("exec reading a terminal: %v, exit %d, %q", err, code, out.String())
	}
}

// TestConcurrentStartsFromTwoGateways starts one incarnation from two
// driver instances at once (a gateway and its successor): exactly one
// supervisor may result, and delete leaves nothing.
func TestConcurrentStartsFromTwoGateways(t *testing.T) {
	d1 := newTestDriver(t, "corral.test")
	d2 := newTestDriver(t, "corral.test")
	for range 10 {
		id := sandbox.NewID()
		spec := driver.Spec{ID: id, Name: "twice", Generation: 1, Image: HostImage, Command: []string{"sleep", "100"}, Policy: policy.Default()}
		if err := d1.Create(ctx(t), spec); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for _, d := range []*Driver{d1, d2} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_ = d.Start(ctx(t), driver.Ref{ID: id, Generation: 1}) // one may lose the race
			}()
		}
		wg.Wait()
		if obj, err := d1.Inspect(ctx(t), id); err != nil || obj.State != driver.StateRunning {
			t.Fatalf("after two concurrent starts: %+v, %v; want running", obj, err)
		}
		if n := supervisors(t, d1.cfg.StateDir); n != 1 {
			t.Fatalf("%d supervisors after two concurrent starts of one incarnation, want 1", n)
		}
		if err := d2.Delete(ctx(t), id); err != nil {
			t.Fatal(err)
		}
		if n := supervisors(t, d1.cfg.StateDir); n != 0 {
			t.Fatalf("%d supervisors after delete", n)
		}
	}
}

// visibleDir makes a directory of the host that sandboxes of the host's
// whole root (image "/") see (read-only), holding a copy of the file at src
// as name.
func visibleDir(t *testing.T, src, name string) string {
	t.Helper()
	dir, err := os.MkdirTemp("/var/tmp", "corral-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	data, err := os.ReadFile(src)
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, name), data, 0o755)
	}
	if err == nil {
		err = os.Chmod(dir, 0o755)
	}
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// The policy cases on the native driver: each case's outcome, as on
// Docker.
func TestPolicyCases(t *testing.T) {
	d := newTestDriver(t, "corral.test")
	drivertest.RunPolicyCases(t, policySandbox(t, d, drivertest.Policy))
}

// policySandbox runs a sandbox of the host's root with the policy
// policyOf gives for its probes' directory, for the policy cases; an
// executable outside every list is visible in it.
func policySandbox(t *testing.T, d *Driver, policyOf func(probeDir string) string) drivertest.PolicySandbox {
	t.Helper()
	probes, outside := visibleDir(t, corral, "corral"), visibleDir(t, "/bin/true", "true")
	s := startSandboxOf(t, d, "/", "policy", policyOf(probes))
	return drivertest.PolicySandbox{
		Exec: func(t *testing.T, command ...string) (int, string, string) {
			t.Helper()
			return s.exec(command...)
		},
		Probe:   filepath.Join(probes, "corral"),
		Outside: filepath.Join(outside, "true"),
		Protections: func(t *testing.T) string {
			obj, err := d.Inspect(ctx(t), s.id)
			if err != nil {
				t.Fatal(err)
			}
			return obj.Protections
		},
	}
}

// On a kernel without Landlock (ABI 0,
// simulated), best_effort runs and says so, hard_requirement refuses.
func TestLandlockUnavailable(t *testing.T) {
	d := newDriverWith(t, "corral.test", Options{Supervisor: testenv.SupervisorOf(corral), Env: simulatedLandlockEnv(0)})
	lists := "filesystem_policy: {read_only: [/bin, /usr, /lib, /lib64, /etc]}\n"
	best := startSandbox(t, d, "best", "version: 1\n"+lists+"landlock: {compatibility: best_effort}\n")
	obj, err := d.Inspect(ctx(t), best.id)
	if err != nil || !strings.Contains(obj.Protections, "landlock unavailable") || !strings.Contains(obj.Protections, "seccomp default") {
		t.Errorf("best_effort without Landlock: %+v, %v; want it running, saying Landlock is unavailable", obj, err)
	}
	best.mustExec("cat", "/proc/version") // not enforced, as reported

	id := sandbox.NewID()
	t.Cleanup(func() { _ = d.Delete(context.Background(), id) })
	spec := driver.Spec{ID: id, Name: "hard", Generation: 1, Image: HostImage, Command: []string{"sleep", "100"},
		Policy: drivertest.MustPolicy(t, "version: 1\n"+lists+"landlock: {compatibility: hard_requirement}\n")}
	if err := d.Create(ctx(t), spec); err != nil {
		t.Fatal(err)
	}
	err = d.Start(ctx(t), driver.Ref{ID: id, Generation: 1})
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "hard_requirement") {
		t.Errorf("hard_requirement without Landlock: start = %v; want it refused, naming the requirement", err)
	}
	if obj, _ := d.Inspect(ctx(t), id); obj.State == driver.StateRunning {
		t.Errorf("hard_requirement without Landlock: the sandbox runs unprotected")
	}
}

// BenchmarkExec times `echo x` in a running sandbox through the driver,
// without the gateway: the exec path's own cost.
func BenchmarkExec(b *testing.B) {
	testenv.RequireRoot(b)
	d, err := New(driver.Config{Label: "corral.bench", StateDir: b.TempDir()}, Options{Supervisor: testenv.SupervisorOf(corral)})
	if err != nil {
		b.Fatal(err)
	}
	c := context.Background()
	id := sandbox.NewID()
	if err := d.Create(c, driver.Spec{ID: id, Name: "bench", Generation: 1, Image: HostImage, Command: []string{"sleep", "3600"}, Policy: policy.Default()}); err != nil {
		b.Fatal(err)
	}
	defer d.Delete(c, id)
	if err := d.Start(c, driver.Ref{ID: id, Generation: 1}); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		b.StopTimer()
		time.Sleep(200 * time.Millisecond) // a spare is ready, as for a user's next command
		b.StartTimer()
		var out bytes.Buffer
		code, err := d.Exec(c, id, driver.ExecOptions{Command: []string{"echo", "x"}, Stdout: &out})
		if err != nil || code != 0 || out.String() != "x\n" {
			b.Fatalf("exec: %v, exit %d, %q", err, code, out.String())
		}
	}
}

// Every native sandbox of the host counts against one pids limit, their
// parent cgroup's, which leaves the host and the gateway an eighth of its
// process ids: eight sandboxes at a limit of 4096 cannot take the last.
func TestSandboxesShareAHostPidsBudget(t *testing.T) {
	newTestDriver(t, "corral.test")
	path := filepath.Join(cgroups.Root, "pids", "corral", "pids.max")
	if cgroups.Unified() {
		path = filepath.Join(cgroups.Root, "corral", "pids.max")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pidMax, err := os.ReadFile("/proc/sys/kernel/pid_max")
	if err != nil {
		t.Fatal(err)
	}
	want, _ := strconv.ParseInt(strings.TrimSpace(string(pidMax)), 10, 64)
	want -= max(want/8, 1024)
	if got := strings.TrimSpace(string(data)); got != strconv.FormatInt(want, 10) {
		t.Errorf("the sandboxes' parent cgroup's pids.max is %s; want %d (pid_max %s less its reserve)", got, want, strings.TrimSpace(string(pidMax)))
	}
}

// threads is how many OS threads this process has.
func threads(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// zombies lists this process's children that ended and were not reaped.
func zombies(t *testing.T) []string {
	t.Helper()
	var out []string
	dirs, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range dirs {
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		rest := string(data[strings.LastIndexByte(string(data), ')')+1:]) // after the command's name
		f := strings.Fields(rest)
		if len(f) > 1 && f[0] == "Z" && f[1] == strconv.Itoa(os.Getpid()) {
			out = append(out, p)
		}
	}
	return out
}

// The supervisors a gateway started cost it no thread each (it waits for
// them on its poller), and those that end are reaped.
func TestLiveSandboxesCostNoThreadEach(t *testing.T) {
	d := newTestDriver(t, "corral.test")
	startSandbox(t, d, "first", "") // the runtime's own threads, started once
	before := threads(t)
	var boxes []*testSandbox
	for i := range 40 {
		boxes = append(boxes, startSandbox(t, d, fmt.Sprintf("live%d", i), ""))
	}
	if grown := threads(t) - before; grown > 10 {
		t.Errorf("40 live sandboxes took %d more threads of the gateway's; want a few at most, not one each", grown)
	}
	for _, s := range boxes {
		if err := d.Stop(ctx(t), driver.Ref{ID: s.id, Generation: 1}, driver.StopOptions{Timeout: 5 * time.Second}); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 20*time.Second, func() error {
		if z := zombies(t); len(z) > 0 {
			return fmt.Errorf("%d supervisors ended and were not reaped: %v", len(z), z)
		}
		return nil
	})
}
