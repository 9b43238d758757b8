package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/internal/cgroups"
	"github.com/corral-sandbox/corral/internal/testenv"
)

// cpuTicks is the CPU time (user and system, in clock ticks) of the
// workload's processes of the native sandbox id (its cgroup's "sandbox"
// group), read from the host.
func cpuTicks(t *testing.T, id string) int64 {
	t.Helper()
	pids := workloadPids(t, id)
	if len(pids) == 0 {
		t.Fatalf("no process in the workload of %s", id)
	}
	var total int64
	for _, pid := range pids {
		stat, err := os.ReadFile("/proc/" + pid + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		// the fields after the command's closing parenthesis; utime and
		// stime are the 14th and 15th of the line
		fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		for _, f := range fields[11:13] {
			n, _ := strconv.ParseInt(f, 10, 64)
			total += n
		}
	}
	return total
}

// workloadPids lists the host processes of native sandbox id's workload
// (its cgroup's "sandbox" group).
func workloadPids(t *testing.T, id string) []string {
	t.Helper()
	procs := filepath.Join(cgroups.Root, "corral", id, "sandbox", "cgroup.procs")
	if !cgroups.Unified() {
		procs = filepath.Join(cgroups.Root, "pids", "corral", id, "sandbox", "cgroup.procs")
	}
	data, err := os.ReadFile(procs)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(data))
}

// counter reads the count the sandbox's loop writes into /sandbox, from
// the host; -1 while the file is being rewritten.
func counter(path string) int64 {
	data, err := os.ReadFile(path)
	if err != nil {
		return -1
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	if err != nil {
		return -1
	}
	return n
}

// A native sandbox counting in a loop: paused, it makes no progress and
// uses no CPU (read from the host); resumed, the same count goes on (its
// memory was kept). It stays paused across a gateway SIGKILL and restart;
// an exec is refused saying it is paused, or resumes it with
// lifecycle.auto_resume; a paused sandbox deletes.
func TestNativePause(t *testing.T) {
	testenv.RequireRoot(t)
	home := t.TempDir()
	g := startGateway(t, home, "--driver", "native")
	loop := `i=0; while true; do i=$((i+1)); echo $i > /sandbox/count.tmp; mv /sandbox/count.tmp /sandbox/count; done`
	id := strings.TrimSpace(mustCorral(t, home, "sandbox", "create", "--name", "count", "--", "sh", "-c", loop))
	count := filepath.Join(home, "native", "sandboxes", id, "workdir", "count")
	testenv.Eventually(t, 10*time.Second, func() error {
		if counter(count) < 100 {
			return os.ErrNotExist
		}
		return nil
	})

	mustCorral(t, home, "sandbox", "pause", "count")
	before, ticks := counter(count), cpuTicks(t, id)
	time.Sleep(2 * time.Second)
	if after := counter(count); after != before || before < 0 {
		t.Fatalf("paused, the count went from %d to %d", before, after)
	}
	if used := cpuTicks(t, id) - ticks; used > 2 { // clock ticks are 10 ms
		t.Errorf("paused, the sandbox used %d clock ticks of CPU in 2 s", used)
	}
	if _, errOut, code := corral(t, home, "sandbox", "exec", "count", "--", "true"); code == 0 || !strings.Contains(errOut, `sandbox "count" is paused`) {
		t.Errorf("exec into the paused sandbox: %d %q", code, errOut)
	}

	g.signal(syscall.SIGKILL)
	g.exitCode(30 * time.Second)
	startGateway(t, home, "--driver", "native")
	time.Sleep(time.Second)
	if after := counter(count); after != before {
		t.Fatalf("after a SIGKILL of the gateway and a restart, the count went from %d to %d", before, after)
	}
	if out := mustCorral(t, home, "sandbox", "get", "count", "-o", "json"); !strings.Contains(out, `"phase": "paused"`) || !strings.Contains(out, `"generation": 1`) {
		t.Fatalf("after the restart:\n%s", out)
	}

	mustCorral(t, home, "sandbox", "resume", "count")
	testenv.Eventually(t, 10*time.Second, func() error {
		if counter(count) <= before {
			return os.ErrNotExist
		}
		return nil
	})
	if out := mustCorral(t, home, "sandbox", "get", "count", "-o", "json"); !strings.Contains(out, `"generation": 1`) {
		t.Errorf("resumed, not the same incarnation:\n%s", out)
	}

	// auto_resume: an exec wakes it
	policy := filepath.Join(t.TempDir(), "p.yaml")
	os.WriteFile(policy, []byte("version: 1\nlifecycle:\n  auto_resume: true\n"), 0o644)
	mustCorral(t, home, "sandbox", "create", "--name", "auto", "--policy", policy, "--", "sleep", "1d")
	mustCorral(t, home, "sandbox", "pause", "auto")
	if out := mustCorral(t, home, "sandbox", "exec", "auto", "--", "echo", "awake"); out != "awake\n" {
		t.Errorf("exec into a paused sandbox with auto_resume: %q", out)
	}

	// a paused sandbox whose compute fails under it is in error, not
	// believed paused
	mustCorral(t, home, "sandbox", "pause", "auto")
	autoID := getJSON(t, home, "auto")["id"].(string)
	procs, err := testenv.Supervisors(filepath.Join(home, "native"))
	if err != nil {
		t.Fatal(err)
	}
	killed := 0
	for pid, bundle := range procs {
		if strings.Contains(bundle, autoID) && syscall.Kill(pid, syscall.SIGKILL) == nil {
			killed++
		}
	}
	if killed != 1 {
		t.Fatalf("killed %d supervisors of %s among %v", killed, autoID, procs)
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		if sb := getJSON(t, home, "auto"); sb["phase"] != "error" || !strings.Contains(sb["reason"].(string), "compute failed") {
			return fmt.Errorf("%v: %v", sb["phase"], sb["reason"])
		}
		return nil
	})
	mustCorral(t, home, "sandbox", "start", "auto")

	mustCorral(t, home, "sandbox", "pause", "count")
	mustCorral(t, home, "sandbox", "delete", "count")
	if _, err := os.Stat(filepath.Join(home, "native", "sandboxes", id)); !os.IsNotExist(err) {
		t.Errorf("the paused sandbox's state outlived its delete: %v", err)
	}
}
