package supervisor_test

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/internal/supervisor"
	"github.com/corral-sandbox/corral/internal/testenv"
)

var bin string

func TestMain(m *testing.M) {
	testenv.MainWithCorral(m, &bin)
}

func supervise(t *testing.T, ready string, command ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"supervise", "--ready-file", ready, "--"}, command...)...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd
}

func waitFile(t *testing.T, path string) string {
	t.Helper()
	var data []byte
	testenv.Eventually(t, 20*time.Second, func() (err error) {
		data, err = os.ReadFile(path)
		return err
	})
	return string(data)
}

func TestExitStatusIsTheMainProcesss(t *testing.T) {
	cmd := supervise(t, filepath.Join(t.TempDir(), "ready"), "sh", "-c", "exit 7")
	err := cmd.Wait()
	if cmd.ProcessState.ExitCode() != 7 {
		t.Fatalf("exit %d (%v), want 7", cmd.ProcessState.ExitCode(), err)
	}
}

func TestSignalsAreForwardedAndReadinessReported(t *testing.T) {
	dir := t.TempDir()
	ready, trapped := filepath.Join(dir, "ready"), filepath.Join(dir, "trapped")
	cmd := supervise(t, ready, "sh", "-c", "trap 'exit 42' TERM; touch "+trapped+"; while :; do sleep 0.05; done")
	pid, err := strconv.Atoi(strings.TrimSpace(waitFile(t, ready)))
	if err != nil || pid == cmd.Process.Pid {
		t.Fatalf("ready file names pid %d (%v); the supervisor is %d", pid, err, cmd.Process.Pid)
	}
	if err := syscall.Kill(pid, 0); err != nil {
		t.Fatalf("the reported main process %d does not run: %v", pid, err)
	}
	// Ready means the main process is spawned; signal only once the shell
	// has set its trap.
	waitFile(t, trapped)
	cmd.Process.Signal(syscall.SIGTERM)
	cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 42 {
		t.Fatalf("exit %d, want 42 from the main process's TERM trap", code)
	}
}

func TestKilledMainProcessGives128PlusSignal(t *testing.T) {
	ready := filepath.Join(t.TempDir(), "ready")
	cmd := supervise(t, ready, "sleep", "100")
	pid, _ := strconv.Atoi(strings.TrimSpace(waitFile(t, ready)))
	syscall.Kill(pid, syscall.SIGKILL)
	cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 128+9 {
		t.Fatalf("exit %d, want 137", code)
	}
}

func TestOrphansAreReaped(t *testing.T) {
	dir := t.TempDir()
	ready, orphan := filepath.Join(dir, "ready"), filepath.Join(dir, "orphan")
	// The subshell's child is orphaned at once and exits soon after; the
	// supervisor (a subreaper here, PID 1 in a sandbox) must reap it.
	cmd := supervise(t, ready, "sh", "-c", fmt.Sprintf("(sh -c 'echo $$ > %s; sleep 0.2' &); sleep 2", orphan))
	defer cmd.Process.Kill()
	pid, _ := strconv.Atoi(strings.TrimSpace(waitFile(t, orphan)))
	testenv.Eventually(t, 20*time.Second, func() error {
		if stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
			return fmt.Errorf("orphan %d not reaped: %s", pid, stat)
		}
		return nil // gone: reaped
	})
	cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("exit %d", code)
	}
}

func TestMissingCommandExits127(t *testing.T) {
	cmd := supervise(t, filepath.Join(t.TempDir(), "ready"), "no-such-command-here")
	cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 127 {
		t.Fatalf("exit %d, want 127", code)
	}
}

// Two StartSpare calls at once (an exec's end and the timer of a long
// exec) start one spare, not one each.
func TestOneSpareAtATime(t *testing.T) {
	c := &supervisor.Children{Spare: true, Bin: bin}
	var wg sync.WaitGroup
	ready := make(chan struct{})
	for range 16 {
		wg.Add(1)
		go func() { defer wg.Done(); <-ready; c.StartSpare() }()
	}
	close(ready)
	wg.Wait()
	spares := sparesOf(t)
	if len(spares) != 1 {
		t.Fatalf("spares started by 16 calls at once: %v; want one", spares)
	}
	c.StartSpare() // with a spare there: nothing to do, and nothing left behind
	if again := sparesOf(t); len(again) != 1 {
		t.Fatalf("spares after one more call: %v; want the one", again)
	}
	// The next one starts once that one is used.
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	pid, _, _, failed, err := c.Start([]string{"true"}, []string{"PATH=" + os.Getenv("PATH")}, []*os.File{null, null, null}, false)
	if err != nil || failed != nil || pid != spares[0] {
		t.Fatalf("Start = pid %d, %v, %v; want it on the spare, %d", pid, failed, err, spares[0])
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		if next := sparesOf(t); len(next) != 1 || next[0] == spares[0] {
			return fmt.Errorf("spares after the first was used: %v; want one new one", next)
		}
		return nil
	})
	// c holds the spare's end of its socket: collected, its file's
	// finalizer would close it, and so end the spare (a supervisor holds
	// its Children for its whole life).
	runtime.KeepAlive(c)
}

// sparesOf returns the pids of the spare exec stages this process started
// that still run (and kills and reaps them when the test ends, so that no
// dying one is counted by the next test).
func sparesOf(t *testing.T) []int {
	var spares []int
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, dir := range dirs {
		cmdline, _ := os.ReadFile(dir + "/cmdline")
		status, _ := os.ReadFile(dir + "/status")
		if strings.Contains(string(cmdline), "--spare-fd") && strings.Contains(string(status), fmt.Sprintf("\nPPid:\t%d\n", os.Getpid())) {
			pid, _ := strconv.Atoi(filepath.Base(dir))
			spares = append(spares, pid)
			t.Cleanup(func() {
				if syscall.Kill(pid, syscall.SIGKILL) == nil {
					_, _ = syscall.Wait4(pid, nil, 0, nil)
				}
			})
		}
	}
	return spares
}

// A spare started ahead (a standby's) runs in a user namespace with no ids
// until AdoptSpare maps it; asked for a command, it first becomes that
// namespace's root (its range's first host id), without the groups and
// the ambient capabilities it was started with, even for a command that
// no policy applies to. Without ids to map, AdoptSpare lets it go.
func TestSpareStartedAhead(t *testing.T) {
	testenv.RequireRoot(t)
	if err := syscall.Setgroups([]int{0, 4}); err != nil { // host groups it must not keep
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Setgroups(nil) })
	c := &supervisor.Children{Spare: true, Bin: bin}
	c.StartSpareAhead()
	spares := unmappedSpares(t)
	if len(spares) != 1 {
		t.Fatalf("spares started ahead: %v; want one", spares)
	}
	const base = 2_000_000_000
	c.IDs = &supervisor.IDRange{Base: base, Size: 65536}
	if err := c.AdoptSpare(); err != nil {
		t.Fatal(err)
	}
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	pid, _, _, failed, err := c.Start([]string{"cat", "/proc/self/status", "/proc/self/uid_map"}, []string{"PATH=" + os.Getenv("PATH")}, []*os.File{null, w, null}, false)
	w.Close()
	if err != nil || failed != nil || pid != spares[0] {
		t.Fatalf("Start = pid %d, %v, %v; want it on the spare, %d", pid, failed, err, spares[0])
	}
	status, _ := io.ReadAll(r) // until cat exits (nothing reaps it here)
	// As the command sees itself: ids 0 of its namespace, which maps them
	// to base (an unmapped id would show as 65534).
	lines := map[string]string{}
	for _, line := range strings.Split(string(status), "\n") {
		k, v, _ := strings.Cut(line, ":")
		lines[k] = strings.Join(strings.Fields(v), " ")
		if f := strings.Fields(line); len(f) == 3 && f[0] == "0" {
			lines["uid_map"] = line
		}
	}
	for k, want := range map[string]string{
		"Uid": "0 0 0 0", "Gid": "0 0 0 0", "Groups": "", "CapAmb": "0000000000000000",
		"uid_map": fmt.Sprintf("0 %d 65536", base),
	} {
		if got := strings.Join(strings.Fields(lines[k]), " "); got != want {
			t.Errorf("the command on the spare started ahead: %s %q; want %q (all it says:\n%s)", k, got, want, status)
		}
	}

	// One that nothing mapped is not asked anything: the Start runs cold.
	forgotten := &supervisor.Children{Spare: true, Bin: bin}
	forgotten.StartSpareAhead()
	ahead := sparesOf(t)
	pid, _, _, failed, err = forgotten.Start([]string{"true"}, []string{"PATH=" + os.Getenv("PATH")}, []*os.File{null, null, null}, false)
	if err != nil || failed != nil || slices.Contains(ahead, pid) {
		t.Fatalf("Start with an unmapped spare = pid %d, %v, %v; want it cold, not on %v", pid, failed, err, ahead)
	}

	before := unmappedSpares(t) // forgotten's, if it is not dead yet
	unmapped := &supervisor.Children{Spare: true, Bin: bin}
	unmapped.StartSpareAhead()
	var left []int
	for _, p := range unmappedSpares(t) { // not the others' refills, which have ids
		if !slices.Contains(before, p) {
			left = append(left, p)
		}
	}
	if len(left) != 1 {
		t.Fatalf("spares started ahead: %v; want one", left)
	}
	if err := unmapped.AdoptSpare(); err != nil { // no IDs
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		for _, p := range left {
			if err := syscall.Kill(p, 0); err == nil && !zombie(p) {
				return fmt.Errorf("spare %d started ahead still runs after AdoptSpare without ids", p)
			}
		}
		return nil
	})
}

// zombie says whether pid has exited and awaits its parent's wait.
// unmappedSpares returns those of sparesOf that run in a user namespace
// with no ids mapped: spares started ahead, not yet adopted.
func unmappedSpares(t *testing.T) []int {
	var unmapped []int
	for _, pid := range sparesOf(t) {
		if m, err := os.ReadFile(fmt.Sprintf("/proc/%d/uid_map", pid)); err == nil && len(bytes.TrimSpace(m)) == 0 {
			unmapped = append(unmapped, pid)
		}
	}
	return unmapped
}

func zombie(pid int) bool {
	status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	return strings.Contains(string(status), "\nState:\tZ")
}
