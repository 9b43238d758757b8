package native

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/driver/drivertest"
	"github.com/corral-sandbox/corral/internal/driver/native/shim"
	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/policy"
	"github.com/corral-sandbox/corral/internal/supervisor"
	"github.com/corral-sandbox/corral/internal/testenv"
)

// The containment issue's attempts, from inside native sandboxes with no
// policy, each checked from the host.

// hostIDs returns the real, effective, saved and file system uids of a
// host process, as the host sees them.
func hostIDs(t *testing.T, pid int) []int {
	t.Helper()
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "Uid:"); ok {
			var ids []int
			for _, f := range strings.Fields(v) {
				n, _ := strconv.Atoi(f)
				ids = append(ids, n)
			}
			return ids
		}
	}
	t.Fatalf("no Uid line for pid %d", pid)
	return nil
}

// mainPID is the host pid of a sandbox's main process: the child of its
// supervisor that runs command.
func (s *testSandbox) mainPID(command string) int {
	s.t.Helper()
	sup, err := readPID(s.d.bundle(s.id, s.gen))
	if err != nil {
		s.t.Fatal(err)
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		rest := string(stat[strings.LastIndexByte(string(stat), ')')+2:])
		fields := strings.Fields(rest)
		comm := string(stat[strings.IndexByte(string(stat), '(')+1 : strings.LastIndexByte(string(stat), ')')])
		if len(fields) > 1 && fields[1] == strconv.Itoa(sup) && comm == command {
			return pid
		}
	}
	s.t.Fatalf("no %s process under supervisor %d", command, sup)
	return 0
}

// Break 1 and 5, and "not root on the host": uid 0 inside is an id of the
// sandbox's own range outside, the default user is 1000, and two
// sandboxes never share host ids.
func TestContainmentHostIDs(t *testing.T) {
	d := newTestDriver(t, "corral.test")
	plain := startSandbox(t, d, "plain", "")
	root := startSandboxOf(t, d, HostImage, "asroot", "version: 1\nprocess: {run_as_user: 0}\n")

	plainIDs := hostIDs(t, plain.mainPID("sleep"))
	rootIDs := hostIDs(t, root.mainPID("sleep"))
	for _, id := range append(append([]int{}, plainIDs...), rootIDs...) {
		if id < idRangeFirst {
			t.Errorf("a sandbox process runs as host uid %d (uids %v and %v); want ids of the sandboxes' own ranges only", id, plainIDs, rootIDs)
		}
	}
	oPlain, _ := d.load(plain.id)
	oRoot, _ := d.load(root.id)
	if want := int(oPlain.IDBase) + policy.DefaultUser; plainIDs[0] != want {
		t.Errorf("a sandbox without a policy runs as host uid %d, want %d (uid %d of its range)", plainIDs[0], want, policy.DefaultUser)
	}
	if rootIDs[0] != int(oRoot.IDBase) {
		t.Errorf("run_as_user 0 runs as host uid %d, want its range's base %d", rootIDs[0], oRoot.IDBase)
	}
	if lo, hi := min(oPlain.IDBase, oRoot.IDBase), max(oPlain.IDBase, oRoot.IDBase); hi-lo < idRangeSize {
		t.Errorf("two sandboxes' id ranges overlap: %d and %d", oPlain.IDBase, oRoot.IDBase)
	}
	if obj, err := d.Inspect(ctx(t), plain.id); err != nil || !strings.Contains(obj.Protections, fmt.Sprintf("user 1000; seccomp default; user namespace (host ids %d-", oPlain.IDBase)) {
		t.Errorf("protections of a sandbox without a policy: %q, %v; want its user and its host id range", obj.Protections, err)
	}
	if got := strings.TrimSpace(plain.mustExec("id", "-u")); got != strconv.Itoa(policy.DefaultUser) {
		t.Errorf("id -u in a sandbox without a policy: %q, want %d", got, policy.DefaultUser)
	}
	// Root inside still owns the sandbox's own files, not the host's.
	root.mustExec("sh", "-c", "echo x > /sandbox/f && chown 123 /sandbox/f")
	if code, _, _ := root.exec("sh", "-c", "echo x > /etc/corral-test || chown 0 /usr/bin"); code == 0 {
		t.Errorf("root of a sandbox changed a host file")
	}
	if code, _, _ := root.exec("cat", "/proc/1/root/etc/hostname"); code == 0 {
		t.Errorf("root of a sandbox reads through its supervisor's root")
	}
	if code, _, _ := root.exec("kill", "-TERM", "1"); code == 0 {
		t.Errorf("root of a sandbox signals its supervisor")
	}
	if obj, err := d.Inspect(ctx(t), root.id); err != nil || obj.State != driver.StateRunning {
		t.Errorf("after root of the sandbox tried to signal its supervisor: %+v, %v; want it running", obj, err)
	}
}

// Break 1, 4 and 5, must hold 2: from inside a sandbox with no policy, no
// host file, socket or other sandbox is reachable; nor under the host's
// whole root ("/", asked for by name), where the ids do the refusing.
func TestContainmentHostFiles(t *testing.T) {
	d := newTestDriver(t, "corral.test")
	d.opts.Hide = []string{d.cfg.StateDir} // the gateway's home, as the gateway wires it
	var planted []string
	for _, dir := range []string{"/srv", "/home", "/var/tmp", "/root"} {
		f, err := os.CreateTemp(dir, "corral-containment-")
		if err != nil {
			t.Fatal(err)
		}
		f.WriteString("host secret\n")
		f.Close()
		os.Chmod(f.Name(), 0o600)
		t.Cleanup(func() { os.Remove(f.Name()) })
		planted = append(planted, f.Name())
	}
	sock, accepted := testenv.HostSocket(t, "containment")
	probeDir := visibleDir(t, corral, "corral")
	probe := filepath.Join(probeDir, "corral")

	other := startSandbox(t, d, "other", "")
	other.mustExec("sh", "-c", "echo other > /sandbox/secret")
	otherFile := filepath.Join(d.workdir(other.id), "secret")

	for _, image := range []string{HostImage, "/"} {
		t.Run("image "+image, func(t *testing.T) {
			s := startSandboxOf(t, d, image, "probe", "", "sleep", "3600")
			for _, path := range append([]string{"/etc/shadow", "/etc/gshadow", otherFile, filepath.Join(d.cfg.StateDir, "sandboxes")}, planted...) {
				// Refused, or masked (an empty file in its place).
				if code, out, _ := s.exec("cat", path); code == 0 && out != "" {
					t.Errorf("cat %s in the sandbox: exit %d, %q; want it refused", path, code, out)
				}
			}
			if image == HostImage {
				for _, dir := range []string{"/root", "/home", "/srv"} {
					if code, out, _ := s.exec("ls", "-A", dir); code == 0 && strings.Contains(out, "corral-containment-") {
						t.Errorf("ls %s in the sandbox lists the host's files: %q", dir, out)
					}
				}
				if code, out, _ := s.exec("ls", "-A", "/run", "/var", "/home", "/root", "/srv", "/mnt", "/opt"); code == 0 || strings.TrimSpace(out) != "" {
					t.Errorf("the host's OS image shows /run, /var, /home, ...: exit %d, %q; want none of them", code, out)
				}
			}
			for _, dir := range []string{"/sys/firmware", "/proc/acpi", "/proc/scsi"} {
				if code, out, _ := s.exec("ls", "-A", dir); code == 0 && strings.TrimSpace(out) != "" {
					t.Errorf("ls %s in the sandbox shows %q; want it masked", dir, out)
				}
			}
			if image == "/" {
				_, out, _ := s.exec(probe, "supervise", "probe", "connect:"+sock, "connect:/var/run/docker.sock")
				if strings.Contains(out, ": ok") {
					t.Errorf("a Unix socket of the host answers in the sandbox: %q", out)
				}
			}
			select {
			case <-accepted:
				t.Errorf("the host's socket %s accepted a connection from the sandbox", sock)
			default:
			}
		})
	}
	// The probe works: the host itself connects.
	if out, err := supervisor.Probe([]string{"connect:" + sock}); err != nil || out[0] != "connect:"+sock+": ok" {
		t.Fatalf("the probe cannot reach the test's own socket from the host: %v %v", out, err)
	}
	select {
	case <-accepted:
	case <-time.After(5 * time.Second):
		t.Fatal("the test's socket accepted nothing from the host")
	}
}

// Break 4: an image directory inside the gateway's home is refused; the
// home is hidden inside any image that contains it.
func TestContainmentImageInsideHome(t *testing.T) {
	d := newTestDriver(t, "corral.test")
	home := d.cfg.StateDir
	d.opts.Hide = []string{home}
	inside := filepath.Join(home, "sandboxes")
	err := d.Validate(driver.Spec{Name: "x", Image: inside, Command: []string{"true"}})
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "inside the gateway's home") {
		t.Errorf("an image inside the gateway's home: %v; want it refused, saying so", err)
	}
	s := startSandboxOf(t, d, "/", "whole", "", "sleep", "3600")
	if code, out, _ := s.exec("ls", "-A", home); code == 0 && strings.TrimSpace(out) != "" {
		t.Errorf("under the host's whole root the gateway's home shows %q; want it hidden", out)
	}
}

// Break 6, must hold 4: what `yes` prints is capped and rotated on disk;
// /tmp is bounded by limits.tmp and a full /tmp leaves the sandbox running.
func TestContainmentDisk(t *testing.T) {
	d := newTestDriver(t, "corral.test")
	d.cfg.LogMaxBytes = 1 << 20
	s := startSandbox(t, d, "yes", "version: 1\nlimits: {tmp: 8Mi}\n", "sh", "-c", "yes corral")
	time.Sleep(3 * time.Second)
	b := d.bundle(s.id, s.gen)
	var total int64
	for _, name := range []string{shim.StdoutFile, shim.StdoutFile + shim.RotatedSuffix, shim.StderrFile, shim.StderrFile + shim.RotatedSuffix} {
		if fi, err := os.Stat(b.Path(name)); err == nil {
			total += fi.Size()
		}
	}
	if total == 0 || total > d.cfg.LogMaxBytes {
		t.Errorf("`yes` for 3 s left %d bytes of output on disk; want some, at most the cap %d", total, d.cfg.LogMaxBytes)
	}
	code, _, errOut := s.exec("dd", "if=/dev/zero", "of=/tmp/fill", "bs=1M", "count=64")
	if code == 0 || !strings.Contains(errOut, "No space left on device") {
		t.Errorf("writing 64 MiB to a /tmp of 8 MiB: exit %d, %q; want ENOSPC", code, errOut)
	}
	if obj, err := d.Inspect(ctx(t), s.id); err != nil || obj.State != driver.StateRunning {
		t.Errorf("after /tmp filled up: %+v, %v; want the sandbox running", obj, err)
	}

	if err := d.Stop(ctx(t), driver.Ref{ID: s.id, Generation: s.gen}, driver.StopOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	err := d.Logs(ctx(t), s.id, driver.LogOptions{Tail: 3}, &out, &out)
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if err != nil || len(lines) != 3 || !strings.HasPrefix("corral", lines[2]) || lines[1] != "corral" {
		got := out.String()
		t.Errorf("logs --tail 3 of a stopped sandbox after rotation: %d bytes ending %q, %v; want 3 lines of corral (the last maybe cut)", len(got), got[max(0, len(got)-100):], err)
	}
}

// On native, whatever a sandbox leaves in what it can write
// (symlinks to host files, FIFOs, a deep tree, files it cannot read back),
// inspect, logs and delete neither hang nor touch the host's files.
func TestContainmentHostileWorkdir(t *testing.T) {
	d := newTestDriver(t, "corral.test")
	marker := filepath.Join(t.TempDir(), "host-marker")
	if err := os.WriteFile(marker, []byte("host file\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := startSandbox(t, d, "hostile", "", "sh", "-c", "ln -s "+marker+" /sandbox/stdout; ln -s /etc /sandbox/etc; "+
		"mkfifo /sandbox/fifo /sandbox/protections; mkdir -p /sandbox/a/b/c/d/e/f/g/h; echo x > /sandbox/a/b/c/d/e/f/g/h/x; "+
		"chmod 000 /sandbox/a; echo ready; sleep 3600")
	testenv.Eventually(t, 10*time.Second, func() error {
		var out strings.Builder
		if err := d.Logs(ctx(t), s.id, driver.LogOptions{}, &out, &out); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out.String(), "ready") {
			return fmt.Errorf("the sandbox never got ready: %q", out.String())
		}
		return nil
	})
	obj, err := d.Inspect(ctx(t), s.id)
	if err != nil || obj.State != driver.StateRunning || strings.Contains(obj.Protections, "host file") {
		t.Errorf("inspect: %+v, %v", obj, err)
	}
	start := time.Now()
	if err := d.Delete(ctx(t), s.id); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("delete took %s", took)
	}
	if data, err := os.ReadFile(marker); err != nil || string(data) != "host file\n" {
		t.Errorf("the host file a sandbox linked to: %q, %v; want it untouched", data, err)
	}
	if _, err := os.Stat("/etc/passwd"); err != nil {
		t.Errorf("the host's /etc after deleting a sandbox that linked to it: %v", err)
	}
	if _, err := os.Stat(d.sandboxDir(s.id)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the sandbox's files after delete: %v; want them gone", err)
	}
}

// A sandbox whose policy sets no pids limit still has one: a fork bomb
// exhausts its sandbox, not the host (read from the host's cgroup files).
func TestContainmentDefaultPids(t *testing.T) {
	d := newTestDriver(t, "corral.test")
	s := startSandbox(t, d, "pids", "")
	var got []string
	for _, dir := range []string{"/sys/fs/cgroup/pids/", "/sys/fs/cgroup/"} {
		if data, err := os.ReadFile(dir + cgroup(s.id) + "/sandbox/pids.max"); err == nil {
			got = append(got, strings.TrimSpace(string(data)))
		}
	}
	if len(got) != 1 || got[0] != strconv.Itoa(policy.DefaultPids) {
		t.Errorf("pids.max of a sandbox without limits: %v; want %d", got, policy.DefaultPids)
	}
}

// On native, /sandbox past limits.disk gets ENOSPC, the
// sandbox keeps running, what it wrote survives a stop and a start, and
// delete leaves no loop device behind.
func TestContainmentDiskLimit(t *testing.T) {
	d := newTestDriver(t, "corral.test")
	s := startSandbox(t, d, "disk", "version: 1\nlimits: {disk: 16Mi}\n")
	s.mustExec("sh", "-c", "echo kept > /sandbox/kept")
	code, _, errOut := s.exec("dd", "if=/dev/zero", "of=/sandbox/fill", "bs=1M", "count=32")
	if code == 0 || !strings.Contains(errOut, "No space left on device") {
		t.Errorf("32 MiB into a /sandbox of 16 MiB: exit %d, %q; want ENOSPC", code, errOut)
	}
	if obj, err := d.Inspect(ctx(t), s.id); err != nil || obj.State != driver.StateRunning {
		t.Errorf("after /sandbox filled up: %+v, %v; want it running", obj, err)
	}
	if entries, _ := os.ReadDir(d.workdir(s.id)); len(entries) != 0 {
		t.Errorf("the sandbox wrote into its host directory, not its disk: %v", entries)
	}
	if err := d.Stop(ctx(t), driver.Ref{ID: s.id, Generation: 1}, driver.StopOptions{Timeout: time.Second}); err != nil {
		t.Fatal(err)
	}
	spec := driver.Spec{ID: s.id, Name: "disk", Generation: 2, Image: HostImage, Command: []string{"sleep", "3600"}, Policy: drivertest.MustPolicy(t, "version: 1\nlimits: {disk: 16Mi}\n")}
	if err := d.Create(ctx(t), spec); err != nil {
		t.Fatal(err)
	}
	if err := d.Start(ctx(t), driver.Ref{ID: s.id, Generation: 2}); err != nil {
		t.Fatal(err)
	}
	s.gen = 2
	if got := s.mustExec("cat", "/sandbox/kept"); got != "kept\n" {
		t.Errorf("after stop and start: %q; want what the sandbox wrote", got)
	}
	// A policy update may grow the disk, never shrink it.
	for _, tc := range []struct {
		gen  int64
		disk string
		ok   bool
	}{{3, "8Mi", false}, {4, "32Mi", true}} {
		if err := d.Stop(ctx(t), driver.Ref{ID: s.id, Generation: tc.gen - 1}, driver.StopOptions{Timeout: time.Second}); err != nil {
			t.Fatal(err)
		}
		spec.Generation, spec.Policy = tc.gen, drivertest.MustPolicy(t, "version: 1\nlimits: {disk: "+tc.disk+"}\n")
		if err := d.Create(ctx(t), spec); err != nil {
			t.Fatal(err)
		}
		err := d.Start(ctx(t), driver.Ref{ID: s.id, Generation: tc.gen})
		if tc.ok != (err == nil) || (!tc.ok && !errors.Is(err, errdefs.ErrInvalidArgument)) {
			t.Fatalf("start with limits.disk %s after 16Mi: %v; want ok=%v (or invalid argument)", tc.disk, err, tc.ok)
		}
	}
	s.gen = 4
	if out := s.mustExec("sh", "-c", "cat /sandbox/kept; dd if=/dev/zero of=/sandbox/fill bs=1M count=24 >/dev/null 2>&1 && echo wrote"); out != "kept\nwrote\n" {
		t.Errorf("after growing the disk to 32 MiB: %q; want the old files and room for 24 MiB more", out)
	}
	if held := loopsBacking(t, s.id); len(held) == 0 {
		t.Fatalf("no loop device holds the disk of %s while it runs?", s.id)
	}
	if err := d.Delete(ctx(t), s.id); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, func() error {
		if held := loopsBacking(t, s.id); len(held) > 0 {
			return fmt.Errorf("loop devices still hold the deleted sandbox's disk: %v", held)
		}
		return nil
	})
}

// loopsBacking lists the loop devices whose backing file's path (wherever
// it was moved since, deleted or not) names the sandbox id.
func loopsBacking(t *testing.T, id string) []string {
	t.Helper()
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	var held []string
	for _, f := range files {
		if data, err := os.ReadFile(f); err == nil && strings.Contains(string(data), id) {
			held = append(held, f)
		}
	}
	return held
}

// A sandbox's /sandbox on its own disk (limits.disk) opens from the host
// while it runs (in its supervisor's mount namespace, not following a link
// the sandbox planted) and while it is stopped (the image mounted for the
// call, and unmounted after, so that the next start mounts it again).
func TestOpenWorkdirOfADisk(t *testing.T) {
	d := newTestDriver(t, "corral.test")
	s := startSandbox(t, d, "disk", "version: 1\nlimits: {disk: 16Mi}\n")
	s.mustExec("sh", "-c", "echo on-disk > /sandbox/f; ln -s /etc /sandbox/etc-link")
	read := func(what string) {
		t.Helper()
		root, release, err := d.OpenWorkdir(ctx(t), s.id)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		data, err := root.ReadFile("f")
		if err != nil || string(data) != "on-disk\n" {
			t.Errorf("%s: /sandbox/f is %q, %v", what, data, err)
		}
		if _, err := root.ReadFile("etc-link/hostname"); err == nil {
			t.Errorf("%s: a link out of /sandbox was followed", what)
		}
		root.Close()
		release()
	}
	read("running")
	if err := d.Stop(ctx(t), driver.Ref{ID: s.id, Generation: 1}, driver.StopOptions{Timeout: time.Second}); err != nil {
		t.Fatal(err)
	}
	read("stopped")
	if err := d.Start(ctx(t), driver.Ref{ID: s.id, Generation: 1}); err != nil {
		t.Fatalf("a start after the disk was opened from the host: %v", err)
	}
	if got := s.mustExec("cat", "/sandbox/f"); got != "on-disk\n" {
		t.Errorf("after the start: %q", got)
	}
}
