package main

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
	"github.com/corral-sandbox/corral/internal/testenv"
)

// nativeGateway starts a gateway on the native driver. Supervisors outlive
// gateways by design, so those a failed test leaves are killed at its end.
func nativeGateway(t *testing.T, home string, args ...string) *gatewayProc {
	t.Helper()
	testenv.RequireRoot(t)
	t.Cleanup(func() {
		for _, pid := range supervisorPids(t, home) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	return startGateway(t, home, append([]string{"--driver", "native"}, args...)...)
}

// supervisorPids returns the pids of the live supervisors of a home's
// native sandboxes, in order.
func supervisorPids(t *testing.T, home string) []int {
	t.Helper()
	procs, err := testenv.Supervisors(filepath.Join(home, "native"))
	if err != nil {
		t.Fatal(err)
	}
	return slices.Sorted(maps.Keys(procs))
}

func TestNativeSandboxThroughCLI(t *testing.T) {
	home := t.TempDir()
	nativeGateway(t, home)
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policy, []byte("version: 1\nlimits: {memory: 128Mi, cpus: 0.5, pids: 64}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	mustCorral(t, home, "sandbox", "create", "--name", "box", "--policy", policy, "--", "sh", "-c", "echo hello from main; exec sleep 1000")
	out, errOut, code := corral(t, home, "sandbox", "exec", "box", "--", "sh", "-c", "echo out; echo err >&2; hostname; echo kept > /sandbox/file; exit 3")
	if code != 3 || out != "out\nbox\n" || errOut != "err\n" {
		t.Fatalf("exec: code %d stdout %q stderr %q", code, out, errOut)
	}
	if out, _, code := corral(t, home, "sandbox", "exec", "box", "--", "sh", "-c", "echo no > /etc/corral-test"); code == 0 {
		t.Fatalf("a write to /etc succeeded in the sandbox: %q", out)
	}
	if logs := mustCorral(t, home, "sandbox", "logs", "box"); !strings.Contains(logs, "hello from main") {
		t.Fatalf("logs = %q", logs)
	}
	pids := supervisorPids(t, home)
	if n := len(pids); n != 1 {
		t.Fatalf("%d supervisors run, want 1", n)
	}
	runsHelper(t, pids[0])
	mustCorral(t, home, "sandbox", "stop", "box")
	if n := len(supervisorPids(t, home)); n != 0 {
		t.Fatalf("%d supervisors run after stop, want none", n)
	}
	startKeepsWorkdir(t, home, "box")
	mustCorral(t, home, "sandbox", "delete", "box")
	if n := len(supervisorPids(t, home)); n != 0 {
		t.Fatalf("%d supervisors run after delete, want none", n)
	}
	if entries, _ := os.ReadDir(filepath.Join(home, "native", "sandboxes")); len(entries) != 0 {
		t.Fatalf("files left after delete: %v", entries)
	}
}

// runsHelper fails unless process pid runs corral-supervise (the binary
// beside the tests' corral, of the same build), not corral itself.
func runsHelper(t *testing.T, pid int) {
	t.Helper()
	running, err := os.Stat(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		t.Fatal(err)
	}
	helper, err := os.Stat(testenv.SupervisorOf(bin))
	if err != nil {
		t.Fatal(err)
	}
	if running.Size() != helper.Size() {
		t.Errorf("supervisor %d runs a binary of %d bytes, not corral-supervise (%d bytes)", pid, running.Size(), helper.Size())
	}
}

// 500 stops and starts with no pause: the same sandbox, never deleted,
// at generation 501 with one supervisor.
func TestNativeRapidStopStart(t *testing.T) {
	home := t.TempDir()
	nativeGateway(t, home)
	c := api(t, home)
	id := strings.TrimSpace(mustCorral(t, home, "sandbox", "create", "--name", "flip", "--", "sleep", "1000"))
	deleted := watchDeletes(t, home, "flip")

	ctx := context.Background()
	for i := range 500 {
		if _, err := c.StopSandbox(ctx, &corralv1.StopSandboxRequest{Name: "flip"}); err != nil {
			t.Fatalf("cycle %d: stop: %v", i, err)
		}
		if _, err := c.StartSandbox(ctx, &corralv1.StartSandboxRequest{Name: "flip"}); err != nil {
			t.Fatalf("cycle %d: start: %v", i, err)
		}
	}
	sb := waitPhase(t, c, "flip", "ready")
	if sb.Id != id || sb.Generation != 501 {
		t.Fatalf("after 500 cycles: %v; want generation 501 of %s", sb, id)
	}
	select {
	case <-deleted:
		t.Fatal("the sandbox was deleted during the cycles")
	default:
	}
	if pids := supervisorPids(t, home); len(pids) != 1 {
		t.Fatalf("supervisors after 500 cycles: %v, want exactly one", pids)
	}
	if out := mustCorral(t, home, "sandbox", "exec", "flip", "--", "cat", "/proc/1/cmdline"); !strings.Contains(out, "gen-501") {
		t.Fatalf("the sandbox's PID 1 is not the supervisor of generation 501: %q", out)
	}
	mustCorral(t, home, "sandbox", "delete", "flip")
	if pids := supervisorPids(t, home); len(pids) != 0 {
		t.Fatalf("supervisors after delete: %v", pids)
	}
}

// Sandboxes outlive a SIGKILLed gateway
// and are reconnected by the next one.
func TestNativeSandboxesOutliveGatewaySIGKILL(t *testing.T) {
	home := t.TempDir()
	g := nativeGateway(t, home)
	const n = 20
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mustCorral(t, home, "sandbox", "create", "--name", fmt.Sprintf("s%02d", i), "--", "sleep", "1000")
		}()
	}
	wg.Wait()
	before := supervisorPids(t, home)
	if len(before) != n {
		t.Fatalf("%d supervisors for %d sandboxes", len(before), n)
	}
	g.signal(syscall.SIGKILL)
	g.exitCode(10 * time.Second)
	time.Sleep(200 * time.Millisecond)
	if after := supervisorPids(t, home); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("supervisors while the gateway is down: %v, before: %v", after, before)
	}

	nativeGateway(t, home)
	c := api(t, home)
	for i := range n {
		name := fmt.Sprintf("s%02d", i)
		if sb := waitPhase(t, c, name, "ready"); sb.Generation != 1 {
			t.Fatalf("%s came back as generation %d: restarted instead of reconnected", name, sb.Generation)
		}
		if out := mustCorral(t, home, "sandbox", "exec", name, "--", "hostname"); out != name+"\n" {
			t.Fatalf("exec in %s: %q", name, out)
		}
	}
	if after := supervisorPids(t, home); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("supervisors after the restart: %v, before: %v (replaced, not reconnected)", after, before)
	}
	for i := range n / 2 {
		mustCorral(t, home, "sandbox", "stop", fmt.Sprintf("s%02d", i))
	}
	if left := supervisorPids(t, home); len(left) != n/2 {
		t.Fatalf("%d supervisors after stopping %d of %d", len(left), n/2, n)
	}
	emptyThroughAPI(t, c)
	if left := supervisorPids(t, home); len(left) != 0 {
		t.Fatalf("supervisors after deleting every sandbox: %v", left)
	}
}

// A killed supervisor is noticed and reported.
func TestNativeSupervisorSIGKILL(t *testing.T) {
	home := t.TempDir()
	nativeGateway(t, home)
	c := api(t, home)
	mustCorral(t, home, "sandbox", "create", "--name", "victim", "--", "sleep", "1000")
	pids := supervisorPids(t, home)
	if len(pids) != 1 {
		t.Fatalf("supervisors: %v", pids)
	}
	if err := syscall.Kill(pids[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	sb := waitPhase(t, c, "victim", "error")
	if !strings.Contains(sb.Reason, "supervisor") || !strings.Contains(sb.Reason, "killed") {
		t.Fatalf("reason %q does not say the supervisor was killed", sb.Reason)
	}
	if v := getJSON(t, home, "victim"); v["phase"] != "error" {
		t.Fatalf("get: %v", v)
	}
	mustCorral(t, home, "sandbox", "start", "victim")
	if sb := waitPhase(t, c, "victim", "ready"); sb.Generation != 2 {
		t.Fatalf("after start: generation %d, want 2", sb.Generation)
	}
	mustCorral(t, home, "sandbox", "exec", "victim", "--", "true")
	mustCorral(t, home, "sandbox", "delete", "victim")
	if left := supervisorPids(t, home); len(left) != 0 {
		t.Fatalf("supervisors after delete: %v", left)
	}
}

// A sandbox whose main process cannot start says why, and can be deleted.
func TestNativeBadCommandIsReported(t *testing.T) {
	home := t.TempDir()
	nativeGateway(t, home)
	_, errOut, code := corral(t, home, "sandbox", "create", "--name", "nope", "--", "/no/such/command")
	if code == 0 || !strings.Contains(errOut, "/no/such/command") {
		t.Fatalf("create of a missing command: exit %d, %q; want a failure that names the command", code, errOut)
	}
	// error, between the retries that a spec error still gets (each one
	// shows starting while it runs: a loaded machine can see that first)
	if sb := waitPhase(t, api(t, home), "nope", "error"); !strings.Contains(sb.Reason, "cannot run") {
		t.Fatalf("sandbox with a missing command: %v", sb)
	}
	mustCorral(t, home, "sandbox", "delete", "nope")
	missing := "oci:" + filepath.Join(t.TempDir(), "no-such-layout")
	_, errOut, code = corral(t, home, "sandbox", "create", "--name", "img", "--image", missing, "--", "true")
	if code == 0 || !strings.Contains(errOut, "no-such-layout") || strings.Contains(errOut, "cannot reach the gateway") {
		t.Fatalf("an image that does not exist on the native driver: exit %d, %q; want an error that names it", code, errOut)
	}
	if out, _, _ := corral(t, home, "sandbox", "list"); strings.Contains(out, "img") {
		t.Fatalf("a refused create left a record:\n%s", out)
	}
}

// A gateway that is not root runs native sandboxes in a user namespace.
func TestNativeUnprivilegedGateway(t *testing.T) {
	testenv.RequireRoot(t) // to become nobody
	const nobody = 65534
	dir, home := homeFor(t, "corral-nobody-", nobody)
	asNobody := func(args ...string) *exec.Cmd {
		cmd := exec.Command(filepath.Join(dir, "corral"), append([]string{"--home", home}, args...)...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
		return cmd
	}
	run := func(args ...string) (string, error) {
		out, err := asNobody(args...).CombinedOutput()
		return string(out), err
	}
	gw := asNobody("gateway", "--driver", "native")
	logs := &testenv.SyncBuffer{}
	gw.Stdout, gw.Stderr = logs, logs
	if err := gw.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = gw.Process.Signal(syscall.SIGTERM)
		_ = gw.Wait()
		if t.Failed() {
			t.Logf("gateway log:\n%s", logs.String())
		}
	})
	if err := testenv.Until(30*time.Second, func() error { _, err := run("sandbox", "list"); return err }); err != nil {
		t.Fatalf("the gateway did not answer: %v", err)
	}
	if out, err := run("sandbox", "create", "--name", "u", "--", "sleep", "1000"); err != nil {
		t.Fatalf("create: %v\n%s", err, out)
	}
	// hostname; then the processes: the supervisor, sleep, sh and ps (not
	// the spare exec stage the supervisor keeps started)
	out, err := run("sandbox", "exec", "u", "--", "sh", "-c", "hostname; ps -e -o pid=,comm= > /tmp/ps; grep -v -e corral-spare -e ' exe$' /tmp/ps | wc -l")
	if f := strings.Fields(out); err != nil || len(f) != 2 || f[0] != "u" || f[1] != "4" {
		t.Errorf("exec as an unprivileged gateway: %v, %q; want the sandbox's hostname and only its 4 processes", err, out)
	}
	if out, err := run("sandbox", "exec", "u", "--", "sh", "-c", "echo x > /etc/corral-test"); err == nil {
		t.Errorf("a write to /etc succeeded: %q", out)
	}
	pids := supervisorPids(t, home)
	if len(pids) != 1 {
		t.Fatalf("supervisors: %v", pids)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pids[0]))
	if err != nil || !strings.Contains(string(status), fmt.Sprintf("\nUid:\t%d\t", nobody)) {
		t.Errorf("the supervisor does not run as uid %d on the host: %v", nobody, err)
	}
	// its ports cannot be reached: that enters a namespace, which needs root
	f := startForwarding(t, asNobody("sandbox", "port-forward", "u", "8080"), 1)
	if body, err := get(f.addrs[0]); err == nil {
		t.Errorf("port-forward as an unprivileged gateway answered %q", body)
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		if !strings.Contains(f.stderr.String(), "needs a gateway running as root") {
			return fmt.Errorf("port-forward's errors: %q", f.stderr.String())
		}
		return nil
	})
	if out, err := run("sandbox", "delete", "u"); err != nil {
		t.Fatalf("delete: %v\n%s", err, out)
	}
	if pids := supervisorPids(t, home); len(pids) != 0 {
		t.Errorf("supervisors after delete: %v", pids)
	}
	// no egress proxy without root: network_policies are refused, saying so
	pol := filepath.Join(dir, "net.yaml")
	if err := os.WriteFile(pol, []byte("version: 1\nnetwork_policies:\n  a:\n    endpoints:\n      - host: a.test\n        port: 80\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := run("sandbox", "create", "--name", "net", "--policy", pol, "--", "sleep", "1"); err == nil || !strings.Contains(out, "does not run as root") {
		t.Errorf("network_policies on a gateway that is not root: %v, %q; want refused with the reason", err, out)
	}
}

// The policy through the CLI: enforced and shown by get; replaced on a
// stopped sandbox, and in force from the next start.
func TestNativePolicyThroughCLI(t *testing.T) {
	home := t.TempDir()
	nativeGateway(t, home)
	dir := t.TempDir()
	write := func(name, text string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	strict := write("strict.yaml", "version: 1\nfilesystem_policy:\n  read_only: [/bin, /usr, /lib, /lib64, /etc]\n  read_write: [/tmp, /dev/null]\nlandlock: {compatibility: hard_requirement}\n")
	loose := write("loose.yaml", "version: 1\nfilesystem_policy:\n  read_only: [/bin, /usr, /lib, /lib64, /etc, /proc]\n  read_write: [/tmp, /dev/null]\n")
	mustCorral(t, home, "sandbox", "create", "--name", "pol", "--policy", strict, "--", "sleep", "1000")
	if _, errOut, code := corral(t, home, "sandbox", "exec", "pol", "--", "cat", "/proc/version"); code == 0 || !strings.Contains(errOut, "Permission denied") {
		t.Fatalf("reading /proc under a policy that does not list it: exit %d, %q", code, errOut)
	}
	if p := fmt.Sprint(getJSON(t, home, "pol")["protections"]); !strings.Contains(p, "landlock ABI") || !strings.Contains(p, "seccomp default") {
		t.Fatalf("get shows protections %q", p)
	}
	if out := mustCorral(t, home, "sandbox", "get", "pol"); !strings.Contains(out, "protections: landlock ABI") {
		t.Fatalf("get's table does not show the protections:\n%s", out)
	}
	if _, errOut, code := corral(t, home, "sandbox", "update", "pol", "--policy", loose); code != 1 || !strings.Contains(errOut, "stop it first") {
		t.Fatalf("update of a running sandbox: exit %d, %q; want it refused", code, errOut)
	}
	mustCorral(t, home, "sandbox", "stop", "pol")
	bad := write("bad.yaml", "version: 1\nprocess: {seccomp: strict}\n")
	if _, errOut, code := corral(t, home, "sandbox", "update", "pol", "--policy", bad); code != 1 || !strings.Contains(errOut, bad+":2: process.seccomp") {
		t.Fatalf("update with an invalid policy: exit %d, %q", code, errOut)
	}
	mustCorral(t, home, "sandbox", "update", "pol", "--policy", loose)
	if p := fmt.Sprint(getJSON(t, home, "pol")["policy"]); !strings.Contains(p, "/proc") {
		t.Fatalf("the stored policy is not the new one: %q", p)
	}
	mustCorral(t, home, "sandbox", "start", "pol")
	if out := mustCorral(t, home, "sandbox", "exec", "pol", "--", "cat", "/proc/version"); !strings.Contains(out, "Linux") {
		t.Fatalf("after update and start, /proc is still not readable: %q", out)
	}
	if hist := mustCorral(t, home, "sandbox", "history", "pol"); !strings.Contains(hist, "update ") || strings.Contains(hist, "pending") {
		t.Fatalf("the journal should hold the settled update and nothing pending:\n%s", hist)
	}
	mustCorral(t, home, "sandbox", "delete", "pol")
}

// On native, an image the driver cannot run fails
// the create at once, naming it, and no sandbox is recorded; so does a
// directory inside the gateway's home.
func TestNativeMissingImageFailsFast(t *testing.T) {
	home := t.TempDir()
	nativeGateway(t, home)
	for _, image := range []string{"nosuch:1", "/no/such/dir", filepath.Join(home, "native")} {
		start := time.Now()
		out, errOut, code := corral(t, home, "sandbox", "create", "--name", "nosuch", "--image", image, "--", "sleep", "1")
		if took := time.Since(start); code != 1 || took > 10*time.Second || !strings.Contains(errOut, image) {
			t.Errorf("create --image %s: exit %d after %s: %s%s; want exit 1 within 10 s naming the image", image, code, took.Round(time.Millisecond), out, errOut)
		}
	}
	if out := mustCorral(t, home, "sandbox", "list", "-o", "json"); strings.Contains(out, "nosuch") {
		t.Errorf("a create with an image native cannot run made a record:\n%s", out)
	}
}

// A root directory given to `create --image` on the native driver is used
// where it is: the CLI's pull ahead of the create does not take it for a
// registry's image.
func TestNativeCreateWithARootDirectory(t *testing.T) {
	home := t.TempDir()
	nativeGateway(t, home)
	out, errOut, code := corral(t, home, "sandbox", "create", "--name", "rootdir", "--image", "/", "--", "sleep", "1000")
	if code != 0 {
		t.Fatalf("create --image /: exit %d\n%s%s", code, out, errOut)
	}
	if sb := waitPhase(t, api(t, home), "rootdir", "ready"); sb.GetSpec().GetImage() != "/" {
		t.Errorf("the sandbox's image: %q; want /", sb.GetSpec().GetImage())
	}
	mustCorral(t, home, "sandbox", "delete", "rootdir")
}

// A full disk under the gateway's home (filled from outside, however it
// happened) leaves delete and delete --force working, and a create refused
// with the reason.
func TestNativeFullDiskStillDeletes(t *testing.T) {
	testenv.RequireRoot(t)
	home := t.TempDir()
	if err := syscall.Mount("tmpfs", home, "tmpfs", 0, "size=64m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(home, syscall.MNT_DETACH) })
	nativeGateway(t, home)
	for _, name := range []string{"kept1", "kept2"} {
		mustCorral(t, home, "sandbox", "create", "--name", name, "--", "sleep", "1000")
	}
	filler, err := os.Create(filepath.Join(home, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	defer filler.Close()
	for _, size := range []int{1 << 20, 4 << 10, 512} { // to the last block: the disk is full
		for chunk := make([]byte, size); ; {
			if _, err := filler.Write(chunk); err != nil {
				break
			}
		}
	}
	_, errOut, code := corral(t, home, "sandbox", "create", "--name", "more", "--", "sleep", "1000")
	if code == 0 || !strings.Contains(errOut, "is full") {
		t.Errorf("a create on a full disk: exit %d, %s; want it refused, saying the disk is full", code, errOut)
	}
	for _, args := range [][]string{{"delete", "kept1"}, {"delete", "--force", "kept2"}} {
		if out, errOut, code := corral(t, home, append([]string{"sandbox"}, append(args, "--timeout", "60s")...)...); code != 0 {
			t.Errorf("sandbox %v on a full disk: exit %d\n%s%s", args, code, out, errOut)
		}
	}
	if out := mustCorral(t, home, "sandbox", "list"); strings.Contains(out, "kept") {
		t.Errorf("after the deletes on a full disk:\n%s", out)
	}
}
