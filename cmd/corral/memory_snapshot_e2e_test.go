package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/internal/testenv"
)

// askMemory asks testenv.MemoryServer in sandbox name for its value.
func askMemory(t *testing.T, home, name string) string {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		out, errOut, code := corral(t, home, append([]string{"sandbox", "exec", name, "--"}, testenv.AskMemoryServer...)...)
		if f := strings.Fields(out); code == 0 && len(f) == 2 && len(f[0]) == 32 {
			return f[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("the memory server of %s does not answer: exit %d, %q %q", name, code, out, errOut)
		}
	}
}

// A memory snapshot through the gateway and the CLI, on native's gVisor
// tier: the source goes on with its state, a sandbox made from the
// snapshot answers with the state of the checkpoint (a Python value that
// exists only in memory) and the files of the same instant, an export
// carries files only, and a sandbox that cannot be checkpointed is
// refused with the reason.
func TestMemorySnapshotThroughCLI(t *testing.T) {
	testenv.RequireRunsc(t)
	testenv.RequireHostPython(t)
	home := t.TempDir()
	nativeGateway(t, home)
	dir := t.TempDir()
	pol := filepath.Join(dir, "memory.yaml")
	if err := os.WriteFile(pol, []byte("version: 1\nisolation: gvisor\nlifecycle:\n  memory_snapshots: true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	mustCorral(t, home, "sandbox", "create", "--name", "py", "--policy", pol, "--", "/usr/bin/python3", "-c", testenv.MemoryServer)
	mustCorral(t, home, "sandbox", "exec", "py", "--", "sh", "-c", "echo before > /sandbox/note")
	secret := askMemory(t, home, "py")

	begun := time.Now()
	mustCorral(t, home, "sandbox", "snapshot", "py", "mem", "--memory")
	t.Logf("snapshot --memory: %v", time.Since(begun))
	if got := askMemory(t, home, "py"); got != secret {
		t.Errorf("after its memory snapshot the source tells %q, want %q", got, secret)
	}
	mustCorral(t, home, "sandbox", "exec", "py", "--", "sh", "-c", "echo after > /sandbox/note")

	begun = time.Now()
	mustCorral(t, home, "sandbox", "create", "--name", "back", "--from-snapshot", "mem")
	t.Logf("create from it, to ready: %v", time.Since(begun))
	if got := askMemory(t, home, "back"); got != secret {
		t.Errorf("the sandbox made from the memory snapshot tells %q, want %q (the checkpoint's)", got, secret)
	}
	if got := mustCorral(t, home, "sandbox", "exec", "back", "--", "cat", "/sandbox/note"); got != "before\n" {
		t.Errorf("its /sandbox/note holds %q, want the checkpoint's instant's %q", got, "before\n")
	}
	if p := getJSON(t, home, "back")["protections"]; !strings.Contains(p.(string), "restored from a memory checkpoint") {
		t.Errorf("its protections %q do not say it was restored", p)
	}
	// A stop and a start boot afresh: a new value.
	mustCorral(t, home, "sandbox", "stop", "back")
	mustCorral(t, home, "sandbox", "start", "back")
	if got := askMemory(t, home, "back"); got == secret {
		t.Errorf("after a stop and a start the sandbox still tells the checkpoint's value: it was not booted afresh")
	}

	// An export carries the files, not the memory.
	archive := filepath.Join(dir, "mem.tar")
	mustCorral(t, home, "snapshot", "export", "mem", archive)
	mustCorral(t, home, "snapshot", "import", archive, "--name", "files")
	mustCorral(t, home, "sandbox", "create", "--name", "fresh", "--from-snapshot", "files")
	if got := askMemory(t, home, "fresh"); got == secret {
		t.Errorf("a sandbox made from the imported archive tells the checkpoint's value: the memory image left the gateway")
	}

	// Refusals, with the reason.
	plain := filepath.Join(dir, "plain.yaml")
	if err := os.WriteFile(plain, []byte("version: 1\nisolation: gvisor\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	mustCorral(t, home, "sandbox", "create", "--name", "plain", "--policy", plain, "--", "sleep", "1d")
	if _, errOut, code := corral(t, home, "sandbox", "snapshot", "plain", "nope", "--memory"); code == 0 || !strings.Contains(errOut, "memory_snapshots") {
		t.Errorf("a memory snapshot of a gVisor sandbox on the host's network: exit %d, %q; want a refusal naming lifecycle.memory_snapshots", code, errOut)
	}
	if _, errOut, code := corral(t, home, "sandbox", "create", "--name", "wrong", "--from-snapshot", "mem", "--policy", plain); code == 0 || !strings.Contains(errOut, "memory_snapshots") {
		t.Errorf("a sandbox from a memory snapshot on a policy that cannot restore it: exit %d, %q; want a refusal", code, errOut)
	}
	if out := mustCorral(t, home, "snapshot", "list"); strings.Contains(out, "nope") {
		t.Errorf("a refused snapshot is listed:\n%s", out)
	}
	for _, name := range []string{"py", "back", "fresh", "plain"} {
		mustCorral(t, home, "sandbox", "delete", name)
	}
	for _, name := range []string{"mem", "files"} {
		mustCorral(t, home, "snapshot", "delete", name)
	}
}

// A gateway SIGKILLed during a memory snapshot (once runsc has begun the
// image, while the sandbox's processes are stopped for the copy) leaves
// no snapshot listed, and the sandbox going on by itself with its state:
// its supervisor restores it in place when the gateway's connection ends.
func TestMemorySnapshotCutShortBySIGKILL(t *testing.T) {
	testenv.RequireRunsc(t)
	testenv.RequireHostPython(t)
	home := t.TempDir()
	g := nativeGateway(t, home)
	pol := filepath.Join(t.TempDir(), "memory.yaml")
	if err := os.WriteFile(pol, []byte("version: 1\nisolation: gvisor\nlifecycle:\n  memory_snapshots: true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	mustCorral(t, home, "sandbox", "create", "--name", "py", "--policy", pol, "--", "/usr/bin/python3", "-c", testenv.MemoryServer)
	// Enough files that the copy takes a while after the checkpoint.
	mustCorral(t, home, "sandbox", "exec", "py", "--", "sh", "-c", "for i in 1 2 3 4 5 6 7 8; do head -c 33554432 /dev/urandom > /sandbox/big$i; done")
	secret := askMemory(t, home, "py")

	snap := exec.Command(bin, "--home", home, "sandbox", "snapshot", "py", "cut", "--memory")
	if err := snap.Start(); err != nil {
		t.Fatal(err)
	}
	defer snap.Wait()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(2 * time.Millisecond) {
		if images, _ := filepath.Glob(filepath.Join(home, "native", "sandboxes", "*", "gen-1", "gvisor", "checkpoint", "checkpoint.img")); len(images) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no memory image was begun within 30 s")
		}
	}
	g.signal(syscall.SIGKILL)
	g.exitCode(30 * time.Second)
	startGateway(t, home, "--driver", "native")
	if out := mustCorral(t, home, "snapshot", "list"); strings.Contains(out, "cut") {
		t.Fatalf("a memory snapshot cut short is listed:\n%s", out)
	}
	if got := askMemory(t, home, "py"); got != secret {
		t.Errorf("after the gateway was killed during its memory snapshot, the sandbox tells %q, want %q", got, secret)
	}
	if sb := getJSON(t, home, "py"); sb["phase"] != "ready" || sb["generation"] != float64(1) {
		t.Errorf("after the restart the sandbox is %v; want it ready at generation 1", sb)
		logs, _ := filepath.Glob(filepath.Join(home, "native", "*", "*", "*", "supervisor.log"))
		for _, l := range logs {
			data, _ := os.ReadFile(l)
			t.Logf("%s:\n%s", l, data)
		}
	}
	mustCorral(t, home, "sandbox", "snapshot", "py", "whole", "--memory")
	mustCorral(t, home, "sandbox", "delete", "py")
	mustCorral(t, home, "snapshot", "delete", "whole")
}

// pause --memory through the gateway and the CLI, on native's gVisor tier:
// the sandbox is paused with no process left on the host, stays so across
// a gateway SIGKILL and restart, and an exec (auto_resume) restores it
// with the state it had in memory; one paused so deletes; a sandbox that
// cannot be checkpointed is refused with the reason.
func TestPauseMemoryThroughCLI(t *testing.T) {
	testenv.RequireRunsc(t)
	testenv.RequireHostPython(t)
	home := t.TempDir()
	g := nativeGateway(t, home)
	dir := t.TempDir()
	pol := filepath.Join(dir, "memory.yaml")
	if err := os.WriteFile(pol, []byte("version: 1\nisolation: gvisor\nlifecycle:\n  memory_snapshots: true\n  auto_resume: true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	mustCorral(t, home, "sandbox", "create", "--name", "py", "--policy", pol, "--", "/usr/bin/python3", "-c", testenv.MemoryServer)
	secret := askMemory(t, home, "py")
	id := getJSON(t, home, "py")["id"].(string)

	begun := time.Now()
	mustCorral(t, home, "sandbox", "pause", "py", "--memory")
	t.Logf("pause --memory: %v", time.Since(begun))
	if sb := getJSON(t, home, "py"); sb["phase"] != "paused" || sb["pause_memory"] != true {
		t.Fatalf("after pause --memory: phase %v, pause_memory %v", sb["phase"], sb["pause_memory"])
	}
	if n := len(workloadPids(t, id)); n != 0 {
		t.Errorf("paused with its memory out, the sandbox has %d processes on the host", n)
	}

	g.signal(syscall.SIGKILL)
	g.exitCode(30 * time.Second)
	g = startGateway(t, home, "--driver", "native")
	time.Sleep(time.Second)
	if sb := getJSON(t, home, "py"); sb["phase"] != "paused" || sb["pause_memory"] != true || sb["generation"] != float64(1) {
		t.Fatalf("after a SIGKILL of the gateway and a restart: phase %v, pause_memory %v, generation %v", sb["phase"], sb["pause_memory"], sb["generation"])
	}
	if n := len(workloadPids(t, id)); n != 0 {
		t.Errorf("after the restart the sandbox paused with its memory out has %d processes on the host", n)
	}

	begun = time.Now()
	if got := askMemory(t, home, "py"); got != secret {
		t.Errorf("restored by an exec (auto_resume), the sandbox tells %q, want %q (what it held in memory)", got, secret)
	}
	t.Logf("exec into it, resumed first: %v", time.Since(begun))
	if sb := getJSON(t, home, "py"); sb["phase"] != "ready" || sb["pause_memory"] == true || sb["generation"] != float64(1) {
		t.Errorf("after the exec: phase %v, pause_memory %v, generation %v; want ready, the same incarnation", sb["phase"], sb["pause_memory"], sb["generation"])
	}

	// A gateway SIGKILLed as the pause is being made: after its restart
	// the sandbox ends paused, and comes back with its state.
	mustCorral(t, home, "sandbox", "pause", "py", "--memory", "--detach")
	time.Sleep(100 * time.Millisecond)
	g.signal(syscall.SIGKILL)
	g.exitCode(30 * time.Second)
	startGateway(t, home, "--driver", "native")
	testenv.Eventually(t, 30*time.Second, func() error {
		if sb := getJSON(t, home, "py"); sb["phase"] != "paused" {
			return fmt.Errorf("%v: %v", sb["phase"], sb["reason"])
		}
		return nil
	})
	if sb := getJSON(t, home, "py"); sb["pause_memory"] != true || len(workloadPids(t, id)) != 0 {
		t.Errorf("paused with memory across a SIGKILL of the gateway during the pause: pause_memory %v, %d processes on the host", sb["pause_memory"], len(workloadPids(t, id)))
	}
	mustCorral(t, home, "sandbox", "resume", "py")
	if got := askMemory(t, home, "py"); got != secret {
		t.Errorf("resumed after a pause cut short by a SIGKILL, the sandbox tells %q, want %q", got, secret)
	}

	mustCorral(t, home, "sandbox", "pause", "py", "--memory")
	mustCorral(t, home, "sandbox", "delete", "py")
	if _, err := os.Stat(filepath.Join(home, "native", "sandboxes", id)); !os.IsNotExist(err) {
		t.Errorf("the state of the sandbox paused with memory outlived its delete: %v", err)
	}

	plain := filepath.Join(dir, "plain.yaml")
	if err := os.WriteFile(plain, []byte("version: 1\nisolation: gvisor\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	mustCorral(t, home, "sandbox", "create", "--name", "plain", "--policy", plain, "--", "sleep", "1d")
	if _, errOut, code := corral(t, home, "sandbox", "pause", "plain", "--memory"); code == 0 || !strings.Contains(errOut, "memory_snapshots") {
		t.Errorf("pause --memory of a gVisor sandbox on the host's network: exit %d, %q; want a refusal naming lifecycle.memory_snapshots", code, errOut)
	}
	if sb := getJSON(t, home, "plain"); sb["phase"] != "ready" {
		t.Errorf("the refused sandbox is %v, want ready as it was", sb["phase"])
	}
	mustCorral(t, home, "sandbox", "delete", "plain")
}
