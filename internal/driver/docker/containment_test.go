package docker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/control"
	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/driver/drivertest"
	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/policy"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/supervisor"
	"github.com/corral-sandbox/corral/internal/testenv"
)

// The containment tests on Docker: a hostile workload inside, checks from
// the host.

const rootPolicy = "version: 1\nprocess: {run_as_user: 0}\n"

// hostMarker writes a file only the host has, and returns its path and
// content: what a sandbox must never make the gateway print.
func hostMarker(t *testing.T) (string, string) {
	t.Helper()
	content := "corral-host-marker-" + sandbox.NewID()
	path := filepath.Join(t.TempDir(), "marker")
	if err := os.WriteFile(path, []byte(content+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, content
}

// within runs f and fails the test when it takes longer than limit.
func within[T any](t *testing.T, limit time.Duration, what string, f func(ctx context.Context) T) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	done := make(chan T, 1)
	go func() { done <- f(ctx) }()
	select {
	case v := <-done:
		return v
	case <-time.After(limit + time.Second):
		t.Fatalf("%s did not return within %s", what, limit)
		panic("unreachable")
	}
}

func mustExec(t *testing.T, d *Driver, id, script string) string {
	t.Helper()
	code, out, errOut := execIn(t, d, id, "sh", "-c", script)
	if code != 0 {
		t.Fatalf("exec %q: exit %d: %s%s", script, code, out, errOut)
	}
	return out
}

// On Docker, a workload that may write the report
// directory (it runs as root) puts symlinks to a host file, FIFOs, a
// directory and a huge file where the supervisor's reports go. Inspect
// (`get`) returns at once without host content, and Delete completes and
// leaves the host files alone.
func TestReportsFromInsideAreNotTrusted(t *testing.T) {
	d := newTestDriver(t, "corral.test."+sandbox.ShortID(sandbox.NewID()))
	marker, content := hostMarker(t)
	id := startPolicySandbox(t, d, "hostile", rootPolicy)
	report := runDir + "/" + supervisor.ProtectionsFile
	attacks := map[string]string{
		"symlink to a host file": "ln -sf " + marker + " " + report,
		"symlink to a host dir":  "rm -f " + report + " && ln -s " + filepath.Dir(marker) + " " + report,
		"fifo":                   "rm -f " + report + " && mkfifo " + report,
		"directory":              "rm -f " + report + " && mkdir " + report + " && ln -s " + marker + " " + report + "/x",
		"huge file":              "rm -rf " + report + " && dd if=/dev/zero of=" + report + " bs=1M count=8 2>/dev/null; echo " + "x >> " + report + "; true", // as much as the run directory takes
	}
	for what, script := range attacks {
		t.Run(what, func(t *testing.T) {
			mustExec(t, d, id, "rm -rf "+report+"; "+script)
			obj := within(t, 5*time.Second, "Inspect", func(ctx context.Context) driver.Object {
				obj, err := d.Inspect(ctx, id)
				if err != nil {
					t.Errorf("Inspect: %v", err)
				}
				return obj
			})
			if strings.Contains(obj.Protections, content) || len(obj.Protections) > supervisor.MaxReportSize+len(usernsNote)+2 {
				t.Errorf("protections after %s: %.200q: host content or past the cap", what, obj.Protections)
			}
			if obj.State != driver.StateRunning {
				t.Errorf("state %s, want running", obj.State)
			}
		})
	}
	// Everything at once, in every report's place, then delete.
	mustExec(t, d, id, fmt.Sprintf("cd %s && rm -rf * && mkfifo %s %s && ln -s %s %s && ln -s %s dir",
		runDir, supervisor.ProtectionsFile, supervisor.FailedFile, marker, readyName, filepath.Dir(marker)))
	if err := within(t, 30*time.Second, "Delete", func(ctx context.Context) error { return d.Delete(ctx, id) }); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if data, err := os.ReadFile(marker); err != nil || !strings.Contains(string(data), content) {
		t.Fatalf("the host marker after delete: %q, %v", data, err)
	}
	if _, err := os.Lstat(d.readyDir(id, 1)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the run directory outlived the delete: %v", err)
	}
	if list, err := d.containers(context.Background(), id); err != nil || len(list) != 0 {
		t.Errorf("containers after delete: %v, %v", list, err)
	}
}

// The same, for what Start waits on: a ready that is a symlink to an
// existing host file is no readiness, and a failed that is a FIFO or a
// symlink is neither waited on nor printed.
func TestWaitReadyTrustsOnlyRegularFiles(t *testing.T) {
	d := newTestDriver(t, "corral.test."+sandbox.ShortID(sandbox.NewID()))
	marker, content := hostMarker(t)
	id := sandbox.NewID()
	t.Cleanup(func() { _ = d.Delete(context.Background(), id) })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := d.Create(ctx, driver.Spec{ID: id, Name: "gone", Generation: 1, Image: testenv.TestImage, Command: []string{"true"}, Policy: policy.Default()}); err != nil {
		t.Fatal(err)
	}
	if err := d.Start(ctx, driver.Ref{ID: id, Generation: 1}); err != nil {
		t.Fatal(err)
	}
	list, err := d.containers(ctx, id)
	if err != nil || len(list) != 1 {
		t.Fatal(list, err)
	}
	testenv.Eventually(t, time.Minute, func() error {
		if stateOf(list[0].State) == driver.StateRunning {
			if list, err = d.containers(ctx, id); err != nil {
				t.Fatal(err)
			}
			return errors.New("the container still runs")
		}
		return nil
	})
	for what, plant := range map[string]func(dir string) error{
		"ready is a symlink to a host file": func(dir string) error { return os.Symlink(marker, filepath.Join(dir, readyName)) },
		"failed is a FIFO":                  func(dir string) error { return unix.Mkfifo(filepath.Join(dir, supervisor.FailedFile), 0o644) },
		"failed is a symlink to a host file": func(dir string) error {
			return os.Symlink(marker, filepath.Join(dir, supervisor.FailedFile))
		},
	} {
		t.Run(what, func(t *testing.T) {
			dir := t.TempDir()
			if err := plant(dir); err != nil {
				t.Fatal(err)
			}
			err := within(t, 10*time.Second, "waitReady", func(ctx context.Context) error { return d.waitReady(ctx, list[0].ID, dir) })
			if err == nil || strings.Contains(err.Error(), content) || !strings.Contains(err.Error(), "exited") {
				t.Errorf("waitReady = %v; want the container's exit, without host content", err)
			}
		})
	}
}

// hostPIDs returns the host pids of a sandbox's supervisor and of its main
// process (the supervisor's child).
func hostPIDs(t *testing.T, d *Driver, id string) (int, int) {
	t.Helper()
	ctx := context.Background()
	c, err := d.running(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	res, err := d.api.ContainerInspect(ctx, c.ID, client.ContainerInspectOptions{})
	if err != nil || res.Container.State == nil || res.Container.State.Pid == 0 {
		t.Fatalf("inspect: %v %+v", err, res.Container.State)
	}
	pid := res.Container.State.Pid
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid)) // a Go process: any thread may have started it
	var f []string
	for _, task := range tasks {
		children, _ := os.ReadFile(task)
		f = append(f, strings.Fields(string(children))...)
	}
	// Its children are the main process and a spare exec stage: the main
	// one is the pid the ready file names, in the container's namespace.
	ready, err := supervisor.ReadReport(d.readyDir(id, generation(c.Labels)), readyName)
	if err != nil {
		t.Fatal(err)
	}
	for _, child := range f {
		ns := strings.Fields(statusField(t, atoi(t, child), "NSpid"))
		if len(ns) > 0 && ns[len(ns)-1] == strings.TrimSpace(string(ready)) {
			return pid, atoi(t, child)
		}
	}
	t.Fatalf("no child of the supervisor (host pid %d: %v) is the main process, pid %s in the container", pid, f, ready)
	return 0, 0
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// statusField is a field of /proc/PID/status on the host.
func statusField(t *testing.T, pid int, field string) string {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("/proc/%d/status has no %s", pid, field)
	return ""
}

// Issue 12 on Docker: the workload runs as uid 1000 unless the policy says
// otherwise, cannot touch the report directory, and protections say that
// the engine does not remap ids. Checked from the host's /proc.
func TestUnprivilegedByDefault(t *testing.T) {
	d := newTestDriver(t, "corral.test."+sandbox.ShortID(sandbox.NewID()))
	id := startPolicySandbox(t, d, "plain", "")
	_, main := hostPIDs(t, d, id)
	if uid, gid := statusField(t, main, "Uid"), statusField(t, main, "Gid"); uid != "1000\t1000\t1000\t1000" || gid != "1000\t1000\t1000\t1000" {
		t.Errorf("the main process runs as host uid %q gid %q; want 1000", uid, gid)
	}
	if out := mustExec(t, d, id, "id -u; id -g; echo hi > /sandbox/f && cat /sandbox/f; echo t > /tmp/t && cat /tmp/t; echo $HOME; touch ~/.profile"); out != "1000\n1000\nhi\nt\n/sandbox\n" {
		t.Errorf("exec as the default user: %q", out)
	}
	for _, script := range []string{"touch " + runDir + "/x", "ln -s /etc/passwd " + runDir + "/" + supervisor.ProtectionsFile + ".tmp",
		"rm -f " + runDir + "/" + supervisor.ProtectionsFile, "mkfifo " + runDir + "/y"} {
		if code, _, _ := execIn(t, d, id, "sh", "-c", script); code == 0 {
			t.Errorf("the default user could %q", script)
		}
	}
	obj, err := d.Inspect(context.Background(), id)
	remaps, _ := d.remapsUsers(context.Background())
	if err != nil || !strings.Contains(obj.Protections, "user 1000") || strings.Contains(obj.Protections, usernsNote) == remaps {
		t.Errorf("protections %q (%v); want user 1000, and %q unless the engine remaps (remaps: %v)", obj.Protections, err, usernsNote, remaps)
	}

	root := startPolicySandbox(t, d, "root", rootPolicy)
	if _, main := hostPIDs(t, d, root); statusField(t, main, "Uid") != "0\t0\t0\t0" {
		t.Errorf("run_as_user 0: the main process runs as %q", statusField(t, main, "Uid"))
	}
	if out := mustExec(t, d, root, "id -u"); out != "0\n" {
		t.Errorf("run_as_user 0: exec as %q", out)
	}
}

// Issue 12 on Docker: the same hardening as native. A read-only root (even
// for root), /tmp of limits.tmp (ENOSPC past it), exactly the capabilities
// native keeps, no_new_privs, all read from the host.
func TestHardenedLikeNative(t *testing.T) {
	d := newTestDriver(t, "corral.test."+sandbox.ShortID(sandbox.NewID()))
	id := startPolicySandbox(t, d, "hard", "version: 1\nprocess: {run_as_user: 0}\nlimits: {tmp: 8Mi}\n")
	sup, main := hostPIDs(t, d, id)
	want := fmt.Sprintf("%016x", supervisor.KeptCapabilities())
	for _, pid := range []int{sup, main} {
		if got := statusField(t, pid, "CapBnd"); got != want {
			t.Errorf("host pid %d: CapBnd %s, want %s (no MKNOD, NET_RAW)", pid, got, want)
		}
		if got := statusField(t, pid, "NoNewPrivs"); got != "1" {
			t.Errorf("host pid %d: NoNewPrivs %s", pid, got)
		}
	}
	if got := statusField(t, sup, "CapEff"); got != want {
		t.Errorf("supervisor CapEff %s, want %s", got, want)
	}
	if got := hostPidsMax(t, main); got != strconv.Itoa(policy.DefaultPids) {
		t.Errorf("pids.max of a sandbox whose policy sets none: %q, want %d", got, policy.DefaultPids)
	}
	for _, path := range []string{"/x", "/etc/x", "/bin/x", "/.corral/x"} {
		code, _, errOut := execIn(t, d, id, "touch", path)
		if code == 0 || !strings.Contains(errOut, "Read-only file system") {
			t.Errorf("root touches %s: exit %d %q; want a read-only file system", path, code, errOut)
		}
	}
	mounts := mustExec(t, d, id, "grep ' /tmp ' /proc/mounts")
	for _, opt := range []string{"tmpfs", "nosuid", "nodev", "size=8192k"} {
		if !strings.Contains(mounts, opt) {
			t.Errorf("/tmp mount %q lacks %s", mounts, opt)
		}
	}
	if mode := mustExec(t, d, id, "stat -c %a /tmp"); mode != "1777\n" {
		t.Errorf("/tmp mode %q, want 1777", mode)
	}
	code, _, errOut := execIn(t, d, id, "dd", "if=/dev/zero", "of=/tmp/fill", "bs=1M", "count=9")
	if code == 0 || !strings.Contains(errOut, "No space left on device") {
		t.Errorf("9 MiB into an 8 MiB /tmp: exit %d %q; want ENOSPC", code, errOut)
	}
	if out := mustExec(t, d, id, "rm /tmp/fill; echo ok > /sandbox/ok && cat /sandbox/ok"); out != "ok\n" {
		t.Errorf("after ENOSPC: %q", out)
	}
}

// On Docker, `yes` for seconds keeps at most the
// configured cap on the host's disk.
func TestLogsAreCapped(t *testing.T) {
	testenv.RequireDocker(t)
	const logCap = 1 << 20
	d, err := New(driver.Config{Label: "corral.test." + sandbox.ShortID(sandbox.NewID()), StateDir: stateDir(t), LogMaxBytes: logCap},
		Options{Host: testenv.DockerHost(), PullPolicy: "never", Supervisor: testenv.SupervisorOf(corralBin)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	id := sandbox.NewID()
	t.Cleanup(func() { _ = d.Delete(context.Background(), id) })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := d.Create(ctx, driver.Spec{ID: id, Name: "yes", Generation: 1, Image: testenv.TestImage, Command: []string{"yes"}, Policy: policy.Default()}); err != nil {
		t.Fatal(err)
	}
	if err := d.Start(ctx, driver.Ref{ID: id, Generation: 1}); err != nil {
		t.Fatal(err)
	}
	c, err := d.running(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	res, err := d.api.ContainerInspect(ctx, c.ID, client.ContainerInspectOptions{})
	if err != nil || res.Container.LogPath == "" {
		t.Fatalf("inspect: %v, log path %q", err, res.Container.LogPath)
	}
	logPath := res.Container.LogPath
	kept := func() (int64, []string) {
		files, _ := filepath.Glob(logPath + "*")
		var total int64
		for _, f := range files {
			if st, err := os.Stat(f); err == nil {
				total += st.Size()
			}
		}
		return total, files
	}
	var most int64
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		total, files := kept()
		most = max(most, total)
		if total > logCap {
			t.Fatalf("%d bytes of logs on disk (%v), cap %d", total, files, logCap)
		}
	}
	if most < logCap/4 {
		t.Fatalf("only %d bytes of logs: did yes run?", most)
	}
	if err := d.Stop(ctx, driver.Ref{ID: id, Generation: 1}, driver.StopOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	if total, files := kept(); total > logCap {
		t.Fatalf("after stop: %d bytes of logs on disk (%v), cap %d", total, files, logCap)
	}
	var out strings.Builder
	if err := d.Logs(ctx, id, driver.LogOptions{Tail: 3}, &out, &out); err != nil || out.String() != "y\ny\ny\n" {
		t.Errorf("logs after rotation: %q, %v", out.String(), err)
	}
	t.Logf("at most %d bytes kept (cap %d)", most, logCap)
}

// On Docker, image names are escaped and checked: a reference that does not parse is refused by Validate and by Create,
// naming it, before any Engine API call names it; an image that is missing
// and cannot be pulled is an invalid argument at once.
func TestImagesFailFast(t *testing.T) {
	testenv.RequireDocker(t)
	relay := testenv.NewRelay(t, testenv.DockerSocket())
	d, err := New(driver.Config{Label: "corral.test." + sandbox.ShortID(sandbox.NewID()), StateDir: stateDir(t)},
		Options{Host: "unix://" + relay.Path, PullPolicy: "if_not_present", Supervisor: testenv.SupervisorOf(corralBin)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	bad := []string{
		"busybox?all=1", "busybox#x", "busybox%2F..%2Fx", "busybox%", "x/../../containers/json", "../containers/json",
		"a/./b", "a//b", "Busybox", "busy box", "busybox:lat?est", "busybox\x00", "/busybox", "busybox/",
	}
	for _, image := range bad {
		spec := driver.Spec{ID: sandbox.NewID(), Name: "bad", Generation: 1, Image: image, Command: []string{"true"}}
		if err := d.Validate(spec); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), strconv.Quote(image)) {
			t.Errorf("Validate(%q) = %v; want InvalidArgument naming it", image, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := d.Create(ctx, spec)
		cancel()
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), strconv.Quote(image)) {
			t.Errorf("Create(%q) = %v; want InvalidArgument naming it", image, err)
		}
		_ = d.Delete(context.Background(), spec.ID)
	}
	// The moby client escapes ?, # and % in a path, but path.Join cleans
	// it first: "a/./b", "/busybox" and "x/../../containers/json" would
	// reach other images' and other objects' endpoints. Only the driver's
	// own calls may reach the engine: ping, list, volume removal.
	expected := regexp.MustCompile(`^(HEAD|GET) /_ping$|^GET /v[0-9.]+/containers/json\?|^DELETE /v[0-9.]+/volumes/corral-[0-9a-f]+-[0-9a-f]{8}-sandbox\?`)
	for _, req := range relay.Seen() {
		if !expected.MatchString(req) {
			t.Errorf("an invalid image reached the engine: %s", req)
		}
	}

	for _, policy := range []string{"if_not_present", "always", "never"} {
		t.Run("missing image, pull "+policy, func(t *testing.T) {
			d.opts.PullPolicy = policy
			spec := driver.Spec{ID: sandbox.NewID(), Name: "missing", Generation: 1, Image: "corral-test/nosuch:1", Command: []string{"true"}}
			t.Cleanup(func() { _ = d.Delete(context.Background(), spec.ID) })
			if err := d.Validate(spec); err != nil {
				t.Fatalf("Validate of a valid reference: %v", err)
			}
			start := time.Now()
			err := within(t, 10*time.Second, "Create", func(ctx context.Context) error { return d.Create(ctx, spec) })
			if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), `"corral-test/nosuch:1"`) {
				t.Errorf("Create of a missing image = %v; want InvalidArgument naming it", err)
			}
			t.Logf("refused in %s: %v", time.Since(start).Round(time.Millisecond), err)
		})
	}

	// An engine that does not answer is retried, not refused.
	relay.Down()
	d.opts.PullPolicy = "if_not_present"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = d.Create(ctx, driver.Spec{ID: sandbox.NewID(), Name: "down", Generation: 1, Image: testenv.TestImage, Command: []string{"true"}, Policy: policy.Default()})
	if err == nil || errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("Create with the engine down = %v; want a retryable error", err)
	}
}

// hostPidsMax reads, on the host, pids.max of the cgroup that holds pid
// (cgroup v1 or v2).
func hostPidsMax(t *testing.T, pid int) string {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		dir := ""
		switch {
		case parts[1] == "pids":
			dir = "/sys/fs/cgroup/pids"
		case parts[0] == "0" && parts[1] == "":
			dir = "/sys/fs/cgroup"
		default:
			continue
		}
		if max, err := os.ReadFile(dir + parts[2] + "/pids.max"); err == nil {
			return strings.TrimSpace(string(max))
		}
	}
	t.Fatalf("no pids cgroup for pid %d in %q", pid, data)
	return ""
}

// On Docker, /sandbox past limits.disk gets
// ENOSPC, the sandbox keeps running, what it wrote survives a new
// incarnation, and delete unmounts and removes the disk.
func TestDiskLimit(t *testing.T) {
	d := newTestDriver(t, "corral.test."+sandbox.ShortID(sandbox.NewID()))
	const pol = "version: 1\nlimits: {disk: 16Mi}\n"
	id := startPolicySandbox(t, d, "disk", pol)
	mustExec(t, d, id, "echo kept > /sandbox/kept")
	code, _, errOut := execIn(t, d, id, "dd", "if=/dev/zero", "of=/sandbox/fill", "bs=1M", "count=32")
	if code == 0 || !strings.Contains(errOut, "No space left on device") {
		t.Errorf("32 MiB into a /sandbox of 16 MiB: exit %d, %q; want ENOSPC", code, errOut)
	}
	if obj, err := d.Inspect(context.Background(), id); err != nil || obj.State != driver.StateRunning {
		t.Errorf("after /sandbox filled up: %+v, %v; want it running", obj, err)
	}
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := d.Stop(c, driver.Ref{ID: id, Generation: 1}, driver.StopOptions{Timeout: time.Second}); err != nil {
		t.Fatal(err)
	}
	spec := driver.Spec{ID: id, Name: "disk", Generation: 2, Image: testenv.TestImage, Command: []string{"sleep", "3600"}, Policy: drivertest.MustPolicy(t, pol)}
	if err := d.Create(c, spec); err != nil {
		t.Fatal(err)
	}
	if err := d.Start(c, driver.Ref{ID: id, Generation: 2}); err != nil {
		t.Fatal(err)
	}
	if out := mustExec(t, d, id, "cat /sandbox/kept; id -u; stat -c %u /sandbox"); out != "kept\n1000\n1000\n" {
		t.Errorf("a new incarnation on the disk: %q; want what was written, as user 1000", out)
	}
	if err := d.Delete(c, id); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{d.diskImage(id), d.diskMount(id)} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after delete: %v; want it gone", p, err)
		}
	}
}

// Execs go in through the supervisor's control socket, not the engine's
// exec; the workload's user cannot connect to it; and a root workload
// that puts a symlink to a host socket in its place does not lead the
// gateway there: the exec goes through the engine instead, and the host
// socket hears nothing.
func TestExecThroughControlSocket(t *testing.T) {
	testenv.RequireDocker(t)
	relay := testenv.NewRelay(t, testenv.DockerSocket())
	d, err := New(driver.Config{Label: "corral.test." + sandbox.ShortID(sandbox.NewID()), StateDir: stateDir(t)},
		Options{Host: "unix://" + relay.Path, PullPolicy: "never", Supervisor: testenv.SupervisorOf(corralBin)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	engineExecs := func() int {
		n := 0
		for _, req := range relay.Seen() {
			if strings.HasPrefix(req, "POST ") && strings.HasSuffix(req, "/exec") {
				n++
			}
		}
		return n
	}

	plain := startPolicySandbox(t, d, "plain", "")
	before := len(relay.Seen())
	if out := mustExec(t, d, plain, "echo hi; id -u"); out != "hi\n1000\n" {
		t.Errorf("exec: %q", out)
	}
	if seen := relay.Seen()[before:]; len(seen) != 0 {
		t.Errorf("an exec in a sandbox the driver started asked the engine %v; want nothing (the control socket)", seen)
	}
	// A request with an environment (a policy of its own, say) is refused:
	// the gateway never sends one, and root in the container could.
	conn, err := d.dialControl(plain, 1)
	if err != nil {
		t.Fatal(err)
	}
	null, _ := os.Open(os.DevNull)
	defer null.Close()
	if err := conn.Send(control.Request{Op: control.OpExec, Command: []string{"id", "-u"}, Env: []string{supervisor.PolicyEnv + `={"version":1}`}}, null, null, null); err != nil {
		t.Fatal(err)
	}
	if r, _, err := conn.RecvFiles(); err != nil || r.Error == "" || r.PID != 0 {
		t.Errorf("an exec request with an environment: %+v, %v; want it refused", r, err)
	}
	conn.Close()
	d.ran(plain, 0) // as after a restart of the gateway: the engine says where it runs
	if out := mustExec(t, d, plain, "echo again"); out != "again\n" {
		t.Errorf("exec: %q", out)
	}
	if n := engineExecs(); n != 0 {
		t.Errorf("%d execs went through the engine; want none (the control socket)", n)
	}
	_, out, _ := execIn(t, d, plain, supervisorPath, "supervise", "probe", "connect:"+controlSocket)
	if !strings.Contains(out, "connect:"+controlSocket+": EACCES") {
		t.Errorf("the default user connecting to the control socket: %q; want EACCES", out)
	}

	host, accepted := testenv.HostSocket(t, "control")
	root := startPolicySandbox(t, d, "root", rootPolicy)
	mustExec(t, d, root, "rm "+controlSocket+" && ln -s "+host+" "+controlSocket)
	before = engineExecs()
	if out := mustExec(t, d, root, "echo after"); out != "after\n" {
		t.Errorf("exec after the socket was replaced: %q", out)
	}
	if engineExecs() != before+1 {
		t.Errorf("the exec after the socket was replaced did not go through the engine")
	}
	select {
	case <-accepted:
		t.Error("the gateway followed a symlink the sandbox planted to a socket of the host")
	default:
	}
}
