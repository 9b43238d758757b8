package native

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/driver/drivertest"
	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/files"
	"github.com/corral-sandbox/corral/internal/netns"
	"github.com/corral-sandbox/corral/internal/policy"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/supervisor"
	"github.com/corral-sandbox/corral/internal/testenv"
)

// gvisorPolicy asks for the gVisor tier.
const gvisorPolicy = "version: 1\nisolation: gvisor\n"

func TestGVisorConformance(t *testing.T) {
	testenv.RequireRunsc(t)
	drivertest.RunWith(t, func(t *testing.T, label string) driver.Driver { return newTestDriver(t, label) },
		drivertest.Options{Image: HostImage, InvalidImage: "relative/root", Isolation: policy.IsolationGVisor})
}

// TestGVisorConformanceOCIImage runs the suite on gVisor with an OCI
// image's root.
func TestGVisorConformanceOCIImage(t *testing.T) {
	testenv.RequireRunsc(t)
	img, err := testenv.TestOCIImage(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	drivertest.RunWith(t, func(t *testing.T, label string) driver.Driver { return newImageDriver(t, label) },
		drivertest.Options{Image: "docker-archive:" + img.DockerArchive, InvalidImage: "oci:/does/not/exist", Isolation: policy.IsolationGVisor})
}

// TestGVisorKernel: a sandbox of the gVisor tier runs on gVisor's kernel,
// and a system call the host's kernel has but gVisor's lacks fails with
// ENOSYS while the sandbox runs on.
func TestGVisorKernel(t *testing.T) {
	testenv.RequireRunsc(t)
	d := newTestDriver(t, "corral.test")
	probes := visibleDir(t, corral, "corral")
	// Unconfined: the default seccomp filter refuses syslog(2), which
	// dmesg reads.
	s := startSandboxOf(t, d, "/", "gvisor", gvisorPolicy+"process: {seccomp: unconfined}\n")
	if out := s.mustExec("dmesg"); !strings.Contains(out, "Starting gVisor") {
		t.Errorf("dmesg in a gVisor sandbox: %q, want gVisor's kernel", out)
	}
	if host, _ := supervisor.Probe([]string{"landlock"}); len(host) != 1 || strings.Contains(host[0], "ENOSYS") {
		t.Fatalf("the host's kernel: %q; the test needs one with Landlock", host)
	}
	if out := s.mustExec(probes+"/corral", "supervise", "probe", "landlock"); strings.TrimSpace(out) != "landlock: ENOSYS" {
		t.Errorf("landlock_create_ruleset in a gVisor sandbox: %q, want ENOSYS", out)
	}
	s.mustExec("true") // it still runs
	obj, err := d.Inspect(ctx(t), s.id)
	if err != nil || obj.State != driver.StateRunning || !strings.Contains(obj.Protections, "gVisor") {
		t.Errorf("after the missing system call: %+v, %v; want it running, its protections naming gVisor", obj, err)
	}
	if err := d.Stop(ctx(t), driver.Ref{ID: s.id, Generation: 1}, driver.StopOptions{Timeout: 5 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if obj, err := d.Inspect(ctx(t), s.id); err != nil || obj.State != driver.StateStopped {
		t.Errorf("after a stop: %+v, %v; want stopped", obj, err)
	}
}

// TestGVisorRefusals: what the gVisor tier cannot do is refused at create,
// saying why: Landlock as a hard requirement, and any gVisor sandbox where
// the host has no runsc.
func TestGVisorRefusals(t *testing.T) {
	testenv.RequireRoot(t)
	d := newDriverWith(t, "corral.test", Options{Supervisor: testenv.SupervisorOf(corral), Runsc: "/does/not/exist/runsc"})
	for _, tc := range []struct{ runsc, policy, want string }{
		{"/does/not/exist/runsc", gvisorPolicy, "runsc"},
		{"runsc", gvisorPolicy + "filesystem_policy: {read_only: [/usr]}\nlandlock: {compatibility: hard_requirement}\n", "hard_requirement"},
	} {
		d.opts.Runsc = tc.runsc
		if tc.runsc == "runsc" {
			testenv.RequireRunsc(t)
		}
		spec := driver.Spec{ID: sandbox.NewID(), Name: "refused", Generation: 1, Image: HostImage, Command: []string{"true"},
			Policy: drivertest.MustPolicy(t, tc.policy)}
		if err := d.Validate(spec); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(%q) with runsc %s = %v; want an invalid argument naming %q", tc.policy, tc.runsc, err, tc.want)
		}
		if err := d.Create(context.Background(), spec); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Create(%q) with runsc %s = %v; want it refused", tc.policy, tc.runsc, err)
		}
		tiers := d.Tiers(context.Background())
		if gv := tiers[len(tiers)-1]; gv.Name != policy.IsolationGVisor || gv.Available != (tc.runsc == "runsc") || !strings.Contains(gv.Detail, "runsc") {
			t.Errorf("with runsc %s, the driver's tiers are %+v", tc.runsc, tiers)
		}
	}
}

// TestGVisorPolicyCases: the policy cases on the gVisor tier, whose file
// lists the sandbox's mounts enforce.
func TestGVisorPolicyCases(t *testing.T) {
	testenv.RequireRunsc(t)
	d := newTestDriver(t, "corral.test")
	s := policySandbox(t, d, drivertest.GVisorPolicy)
	s.FileListsByMounts, s.MemoryEndsSandbox = true, true
	drivertest.RunPolicyCases(t, s)
}

// TestGVisorMemory: past its memory limit a gVisor sandbox ends (the limit
// is the whole runsc sandbox's, gVisor's kernel included), and the host's
// gateway starts it again.
func TestGVisorMemory(t *testing.T) {
	testenv.RequireRunsc(t)
	d := newTestDriver(t, "corral.test")
	s := startSandbox(t, d, "memory", gvisorPolicy+"limits: {memory: 64Mi}\n")
	s.mustExec("dd", "if=/dev/zero", "of=/dev/null", "bs=8M", "count=1")
	var out strings.Builder
	code, err := d.Exec(ctx(t), s.id, driver.ExecOptions{Command: []string{"dd", "if=/dev/zero", "of=/dev/null", "bs=256M", "count=1"}, Stdout: &out, Stderr: &out})
	if err == nil && code == 0 {
		t.Fatalf("allocating 256 MiB under a memory limit of 64 MiB succeeded: %q", out.String())
	}
	if !waitGone(ctx(t), d.bundle(s.id, 1), time.Now().Add(10*time.Second)) {
		t.Fatal("the sandbox runs on past its memory limit")
	}
	if obj, err := d.Inspect(ctx(t), s.id); err != nil || obj.State != driver.StateStopped {
		t.Errorf("after its memory ran out: %+v, %v; want stopped", obj, err)
	}
	spec := driver.Spec{ID: s.id, Name: "memory", Generation: 2, Image: HostImage, Command: []string{"sleep", "3600"},
		Policy: drivertest.MustPolicy(t, gvisorPolicy+"limits: {memory: 64Mi}\n")}
	if err := d.Create(ctx(t), spec); err != nil {
		t.Fatal(err)
	}
	if err := d.Start(ctx(t), driver.Ref{ID: s.id, Generation: 2}); err != nil {
		t.Fatal(err)
	}
	s.mustExec("true")
}

// TestGVisorExecTerminal: the terminal of an exec on gVisor is one of the
// host's, which runsc gives gVisor's kernel as the process's terminal:
// it works as one, but has no name in the sandbox's /dev.
func TestGVisorExecTerminal(t *testing.T) {
	testenv.RequireRunsc(t)
	testExecTerminal(t, gvisorPolicy, "not a tty")
}

// TestGVisorNetwork: a gVisor sandbox uses the host's network stack in its
// own loopback-only namespace, so what the gateway serves there (the
// egress proxy at driver.ProxyAddr) is what it reaches, and what it serves
// on its loopback the gateway reaches (port-forward), as on the namespaces
// tier; nothing of the host's network is there.
func TestGVisorNetwork(t *testing.T) {
	testenv.RequireRunsc(t)
	if _, err := os.Stat("/bin/busybox"); err != nil {
		t.Skip("needs /bin/busybox (Debian's busybox-static) for nc")
	}
	d := newTestDriver(t, "corral.test")
	s := startSandbox(t, d, "net", gvisorPolicy)
	ns, err := d.NetNS(ctx(t), driver.Ref{ID: s.id, Generation: 1})
	if err != nil {
		t.Fatal(err)
	}
	// the gateway's side: a listener in the sandbox's namespace
	ln, err := netns.Listen(ns, driver.ProxyAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			fmt.Fprintln(c, "from the gateway")
			c.Close()
		}
	}()
	if out := s.mustExec("/bin/busybox", "nc", "127.0.0.1", strings.TrimPrefix(driver.ProxyAddr, "127.0.0.1:")); out != "from the gateway\n" {
		t.Errorf("the sandbox reads %q from %s, want what the gateway serves there", out, driver.ProxyAddr)
	}
	if out := s.mustExec("cat", "/proc/net/dev"); strings.Count(out, ":") != 1 || !strings.Contains(out, "lo:") {
		t.Errorf("interfaces in the sandbox: %q, want lo only", out)
	}
	host := testenv.ServeLoopback(t, func(c net.Conn) { c.Close() })
	if code, _, _ := s.exec("/bin/busybox", "nc", "-w", "2", "127.0.0.1", strconv.Itoa(host)); code == 0 {
		t.Errorf("the sandbox reaches the host's 127.0.0.1:%d", host)
	}
	// the sandbox's side: a listener the gateway dials, as port-forward does
	s.mustExec("sh", "-c", "echo from the sandbox | /bin/busybox nc -l -p 8080 >/dev/null 2>&1 &")
	testenv.Eventually(t, 10*time.Second, func() error {
		c, err := netns.Dial(ctx(t), ns, "tcp", "127.0.0.1:8080")
		if err != nil {
			return err
		}
		defer c.Close()
		data, err := io.ReadAll(c)
		if string(data) != "from the sandbox\n" {
			return fmt.Errorf("read %q, %v from the sandbox's 127.0.0.1:8080", data, err)
		}
		return nil
	})
}

// TestGVisorFiles: the files API's operations (the exec stage's
// corral-files) run in a gVisor sandbox as on the namespaces tier.
func TestGVisorFiles(t *testing.T) {
	testenv.RequireRunsc(t)
	d := newTestDriver(t, "corral.test")
	s := startSandbox(t, d, "files", gvisorPolicy)
	run := func(req files.Request, stdin string) string {
		t.Helper()
		var stdout, stderr bytes.Buffer
		code, err := d.Exec(ctx(t), s.id, driver.ExecOptions{Command: files.Argv(req), Stdin: strings.NewReader(stdin), Stdout: &stdout, Stderr: &stderr})
		if err != nil || code != 0 {
			t.Fatalf("%s %s: exit %d, %v, %q", req.Op, req.Path, code, err, stderr.String())
		}
		return stdout.String()
	}
	run(files.Request{Op: files.OpWrite, Path: "/sandbox/f"}, "written in\n")
	if got := s.mustExec("cat", "/sandbox/f"); got != "written in\n" {
		t.Errorf("the file written through corral-files holds %q", got)
	}
	var stat files.Result
	if err := json.Unmarshal([]byte(run(files.Request{Op: files.OpStat, Path: "/sandbox/f"}, "")), &stat); err != nil || stat.Info == nil || stat.Info.UID != 1000 {
		t.Errorf("stat of the file written: %+v, %v; want it the sandbox's user's, 1000", stat.Info, err)
	}
	s.mustExec("sh", "-c", "echo from inside > /sandbox/g")
	if got := run(files.Request{Op: files.OpRead, Path: "/sandbox/g"}, ""); got != "from inside\n" {
		t.Errorf("corral-files read %q", got)
	}
}

// TestGVisorFailures: a main command that does not exist fails the start
// saying so, the incarnation staying created; a SIGKILLed supervisor
// takes runsc and the sandbox with it, and the next incarnation starts.
func TestGVisorFailures(t *testing.T) {
	testenv.RequireRunsc(t)
	d := newTestDriver(t, "corral.test")
	id := sandbox.NewID()
	t.Cleanup(func() { _ = d.Delete(context.Background(), id) })
	spec := driver.Spec{ID: id, Name: "nocmd", Generation: 1, Image: HostImage, Command: []string{"/no/such/command"},
		Policy: drivertest.MustPolicy(t, gvisorPolicy)}
	if err := d.Create(ctx(t), spec); err != nil {
		t.Fatal(err)
	}
	err := d.Start(ctx(t), driver.Ref{ID: id, Generation: 1})
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "/no/such/command") {
		t.Errorf("start of a missing command = %v; want an invalid argument that names it", err)
	}
	if obj, _ := d.Inspect(ctx(t), id); obj.State != driver.StateCreated {
		t.Errorf("after a failed start: %+v, want created", obj)
	}

	s := startSandbox(t, d, "killed", gvisorPolicy)
	pid, err := readPID(d.bundle(s.id, 1))
	if err != nil {
		t.Fatal(err)
	}
	runsc := func(args []string) bool {
		return strings.HasPrefix(filepath.Base(args[0]), "runsc") && slices.ContainsFunc(args, func(a string) bool { return strings.Contains(a, s.id) })
	}
	if procs, err := testenv.Processes(runsc); err != nil || len(procs) == 0 {
		t.Fatalf("runsc's processes of the live sandbox: %v, %v; want them found", procs, err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if !waitGone(ctx(t), d.bundle(s.id, 1), time.Now().Add(10*time.Second)) {
		t.Fatal("the killed supervisor still holds its lock")
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		if procs, err := testenv.Processes(runsc); err != nil || len(procs) > 0 {
			return fmt.Errorf("runsc processes of the killed sandbox live on: %v, %v", procs, err)
		}
		return nil
	})
	if obj, err := d.Inspect(ctx(t), s.id); err != nil || obj.State != driver.StateFailed {
		t.Errorf("after SIGKILL of the supervisor: %+v, %v; want failed", obj, err)
	}
	if err := d.Create(ctx(t), driver.Spec{ID: s.id, Name: "killed", Generation: 2, Image: HostImage, Command: []string{"sleep", "3600"},
		Policy: drivertest.MustPolicy(t, gvisorPolicy)}); err != nil {
		t.Fatal(err)
	}
	if err := d.Start(ctx(t), driver.Ref{ID: s.id, Generation: 2}); err != nil {
		t.Fatal(err)
	}
	s.mustExec("true")
}

// BenchmarkGVisorCreateStart is BenchmarkCreateStart on the gVisor tier.
func BenchmarkGVisorCreateStart(b *testing.B) {
	testenv.RequireRunsc(b)
	pol := policy.Default()
	pol.Isolation = policy.IsolationGVisor
	benchmarkCreateStart(b, pol)
}

// TestGVisorDiskLimits: /sandbox on its own disk (limits.disk) and /tmp
// of limits.tmp fill up with ENOSPC on gVisor too, and the sandbox runs on.
func TestGVisorDiskLimits(t *testing.T) {
	testenv.RequireRunsc(t)
	d := newTestDriver(t, "corral.test")
	s := startSandbox(t, d, "disk", gvisorPolicy+"limits: {disk: 16Mi, tmp: 8Mi}\n")
	for _, path := range []string{"/sandbox/fill", "/tmp/fill"} {
		code, _, errOut := s.exec("dd", "if=/dev/zero", "of="+path, "bs=1M", "count=32")
		if code == 0 || !strings.Contains(errOut, "No space left on device") {
			t.Errorf("32 MiB into %s: exit %d, %q; want ENOSPC", path, code, errOut)
		}
	}
	if entries, _ := os.ReadDir(d.workdir(s.id)); len(entries) != 0 {
		t.Errorf("the sandbox wrote into its host directory, not its disk: %v", entries)
	}
	s.mustExec("true")
}

// TestGVisorFileListsStayInTheRoot: a listed path is looked up inside the
// sandbox's root: one through a symlink that leads out of it (to the
// host's /etc) is absent, never the host's file; on the host's operating
// system a listed path outside its HostOSDirs is absent too.
func TestGVisorFileListsStayInTheRoot(t *testing.T) {
	testenv.RequireRunsc(t)
	if _, err := os.Stat("/bin/busybox"); err != nil {
		t.Skip("needs /bin/busybox (Debian's busybox-static)")
	}
	root := visibleDir(t, "/bin/busybox", "busybox")
	if err := os.Symlink("/etc", filepath.Join(root, "etc")); err != nil {
		t.Fatal(err)
	}
	d := newTestDriver(t, "corral.test")
	s := startSandboxOf(t, d, root, "escape", gvisorPolicy+
		"filesystem_policy: {read_only: [/busybox, /etc/hostname]}\nlandlock: {compatibility: best_effort}\n", "/busybox", "sleep", "3600")
	if code, out, _ := s.exec("/busybox", "cat", "/etc/hostname"); code == 0 {
		t.Errorf("the sandbox reads the host's /etc/hostname through its root's symlink: %q", out)
	}
	s.mustExec("/busybox", "true")

	// on the host's operating system, only its HostOSDirs, listed or not
	host := startSandbox(t, d, "host", gvisorPolicy+
		"filesystem_policy: {read_only: [/bin, /usr, /lib, /lib64, /root]}\nlandlock: {compatibility: best_effort}\n")
	if code, _, _ := host.exec("sh", "-c", "test -e /root"); code == 0 {
		t.Errorf("a sandbox on the host's operating system sees the host's /root, listed")
	}
}

// TestGVisorExecCallerGone: an exec whose caller goes away is killed
// inside gVisor, not only its runsc exec on the host.
func TestGVisorExecCallerGone(t *testing.T) {
	testenv.RequireRunsc(t)
	d := newTestDriver(t, "corral.test")
	s := startSandbox(t, d, "gone", gvisorPolicy)
	c, cancel := context.WithTimeout(ctx(t), 2*time.Second)
	defer cancel()
	if _, err := d.Exec(c, s.id, driver.ExecOptions{Command: []string{"sleep", "301"}, Stdout: io.Discard, Stderr: io.Discard}); err == nil {
		t.Fatal("an exec of sleep 301 whose caller gave up after 2s returned no error")
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		if out := s.mustExec("ps", "-e", "-o", "args="); strings.Contains(out, "sleep 301") {
			return fmt.Errorf("the abandoned exec lives on in the sandbox: %q", out)
		}
		return nil
	})
}
