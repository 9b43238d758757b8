package native

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/testenv"
)

// An exec runs on the spare exec stage its supervisor started ahead (its
// process becomes the command), the supervisor starts the next one, and a
// spare killed from outside only makes the next exec start cold.
func TestExecOnSpare(t *testing.T) {
	d := newTestDriver(t, "corral.test")
	s := startSandbox(t, d, "spare", "version: 1\nprocess: {run_as_user: 0}\n")
	if code, _, errOut := s.exec("true"); code != 0 {
		t.Fatalf("exec: exit %d, %s", code, errOut)
	}
	netns, err := d.NetNS(ctx(t), driver.Ref{ID: s.id, Generation: 1})
	if err != nil {
		t.Fatal(err)
	}
	supervisor, err := strconv.Atoi(strings.Split(netns, "/")[2]) // /proc/PID/ns/net
	if err != nil {
		t.Fatal(err)
	}
	spare := waitSpare(t, supervisor, 0)
	code, out, errOut := s.exec("sh", "-c", "echo $$")
	if want := strconv.Itoa(spare.inner); code != 0 || strings.TrimSpace(out) != want {
		t.Fatalf("exec printed its pid %q (exit %d, %s); want the spare's, %s", out, code, errOut, want)
	}
	// root in the sandbox cannot reach into a waiting spare: the one
	// started after this exec, once its program set itself up
	script := `sleep 2; for p in /proc/[0-9]*; do [ "$(cat $p/comm 2>/dev/null)" = corral-spare ] || continue; ` +
		`echo found; head -c 1 $p/environ; head -c 1 $p/mem; done`
	if code, out, errOut := s.exec("sh", "-c", script); !strings.Contains(out, "found") || strings.Count(errOut, "ermission denied") != 2 {
		t.Errorf("root in the sandbox read a waiting spare's environ or mem: exit %d, %q %q; want both refused", code, out, errOut)
	}
	next := waitSpare(t, supervisor, spare.host)
	if err := syscallKill(next.host); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := s.exec("echo", "cold"); code != 0 || out != "cold\n" {
		t.Fatalf("exec after its spare was killed: exit %d, %q, %s", code, out, errOut)
	}
	// A stopped spare (root in the sandbox may stop it) does not hang the
	// exec given to it: it is killed, and the exec starts cold.
	stopped := waitSpare(t, supervisor, next.host)
	if err := unix.Kill(stopped.host, unix.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := s.exec("echo", "not stuck"); code != 0 || out != "not stuck\n" {
		t.Fatalf("exec after its spare was stopped: exit %d, %q, %s", code, out, errOut)
	}
	waitSpare(t, supervisor, stopped.host)
}

// spareProc is a spare exec stage: its pid on the host and in the sandbox.
type spareProc struct{ host, inner int }

// waitSpare waits for the one spare child of the supervisor other than
// not.
func waitSpare(t *testing.T, supervisor, not int) spareProc {
	t.Helper()
	host := waitProcess(t, fmt.Sprintf("spares of supervisor %d", supervisor), not, func(cmdline, status string) bool {
		return strings.Contains(cmdline, "--spare-fd") && strings.Contains(status, fmt.Sprintf("\nPPid:\t%d\n", supervisor))
	})
	status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", host))
	p := spareProc{host: host}
	for _, line := range strings.Split(string(status), "\n") {
		if ids, ok := strings.CutPrefix(line, "NSpid:"); ok {
			f := strings.Fields(ids)
			p.inner, _ = strconv.Atoi(f[len(f)-1])
		}
	}
	return p
}

// waitProcess waits until exactly one process other than not matches (by
// its command line and status), and returns its pid.
func waitProcess(t *testing.T, what string, not int, match func(cmdline, status string) bool) int {
	t.Helper()
	var found int
	testenv.Eventually(t, 10*time.Second, func() error {
		dirs, _ := filepath.Glob("/proc/[0-9]*")
		var pids []int
		for _, dir := range dirs {
			pid, _ := strconv.Atoi(filepath.Base(dir))
			cmdline, _ := os.ReadFile(dir + "/cmdline")
			status, _ := os.ReadFile(dir + "/status")
			if pid != not && match(string(cmdline), string(status)) {
				pids = append(pids, pid)
			}
		}
		if len(pids) != 1 {
			return fmt.Errorf("%s: %v; want one (other than %d)", what, pids, not)
		}
		found = pids[0]
		return nil
	})
	return found
}

func syscallKill(pid int) error {
	p, err := os.FindProcess(pid)
	if err != nil {
		return err
	}
	return p.Kill()
}

// The main process runs on a spare started before its supervisor pivoted
// into the sandbox's root: it runs in that root and in /sandbox, never in
// the host's root or the supervisor's directory of the host.
func TestMainProcessInTheSandboxRoot(t *testing.T) {
	d := newTestDriver(t, "corral.test")
	s := startSandbox(t, d, "root", "", "sleep", "3600")
	main := s.mainPID("sleep")
	sup, err := readPID(s.d.bundle(s.id, s.gen))
	if err != nil {
		t.Fatal(err)
	}
	var mainRoot, supRoot, hostRoot, mainCwd, workdir unix.Stat_t
	for path, st := range map[string]*unix.Stat_t{
		fmt.Sprintf("/proc/%d/root", main): &mainRoot, fmt.Sprintf("/proc/%d/root", sup): &supRoot, "/": &hostRoot,
		fmt.Sprintf("/proc/%d/cwd", main): &mainCwd, fmt.Sprintf("/proc/%d/root/sandbox", sup): &workdir,
	} {
		if err := unix.Stat(path, st); err != nil {
			t.Fatal(err)
		}
	}
	if mainRoot.Dev != supRoot.Dev || mainRoot.Ino != supRoot.Ino || (mainRoot.Dev == hostRoot.Dev && mainRoot.Ino == hostRoot.Ino) {
		t.Errorf("main process's root: device %d inode %d; want the sandbox's (%d, %d), not the host's (%d, %d)",
			mainRoot.Dev, mainRoot.Ino, supRoot.Dev, supRoot.Ino, hostRoot.Dev, hostRoot.Ino)
	}
	if mainCwd.Dev != workdir.Dev || mainCwd.Ino != workdir.Ino {
		t.Errorf("main process's directory: device %d inode %d; want /sandbox (%d, %d)", mainCwd.Dev, mainCwd.Ino, workdir.Dev, workdir.Ino)
	}
	// and in the sandbox's cgroup, where its limits are, though its spare
	// started before the cgroup was made
	groups, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", main))
	if err != nil {
		t.Fatal(err)
	}
	if want := cgroup(s.id) + "/sandbox\n"; !strings.Contains(string(groups), want) {
		t.Errorf("main process's cgroups:\n%s\nwant %s", groups, want)
	}
}
