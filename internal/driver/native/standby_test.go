package native

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/internal/testenv"
)

// A start leaves a standby supervisor behind; the next start hands its
// sandbox to it (the sandbox's supervisor is that process); a standby
// killed from outside only makes the next start start its own; a closed
// driver's standby exits.
func TestStartOnStandby(t *testing.T) {
	d := newTestDriver(t, "corral.test")
	startSandbox(t, d, "first", "")
	sb := waitStandby(t, d, 0)
	second := startSandbox(t, d, "second", "")
	if sup, err := readPID(d.bundle(second.id, 1)); err != nil || sup != sb {
		t.Fatalf("the second sandbox's supervisor is %d (%v); want the standby, %d", sup, err, sb)
	}
	if code, out, errOut := second.exec("echo", "hi"); code != 0 || out != "hi\n" {
		t.Fatalf("exec in the sandbox a standby runs: exit %d, %q, %s", code, out, errOut)
	}
	next := waitStandby(t, d, sb)
	if err := syscall.Kill(next, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitExited(t, next)
	waitHeld(t, d, next) // the driver finds out at the handoff
	third := startSandbox(t, d, "third", "")
	if sup, err := readPID(d.bundle(third.id, 1)); err != nil || sup == next {
		t.Fatalf("the third sandbox's supervisor is %d (%v); want a new one, not the killed standby", sup, err)
	}
	last := waitStandby(t, d, next)
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	waitExited(t, last)
	if err := d.Delete(context.Background(), third.id); err != nil { // a closed driver still deletes
		t.Fatal(err)
	}
}

// waitHeld waits until the driver holds the standby pid (it may show in ps
// before the goroutine that started it has handed it to the driver).
func waitHeld(t *testing.T, d *Driver, pid int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		d.standbyMu.Lock()
		held := d.standby != nil && d.standby.pid == pid
		d.standbyMu.Unlock()
		if held {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the driver does not hold standby %d after 10 s", pid)
		}
	}
}

// waitStandby waits until the driver holds a standby supervisor other
// than not, one that runs and shows as corral-standby, and returns its pid.
// It asks the driver which: a standby of an earlier test's driver may still
// be exiting, a child of this process with the same name.
func waitStandby(t *testing.T, d *Driver, not int) int {
	t.Helper()
	var pid int
	testenv.Eventually(t, 10*time.Second, func() error {
		d.standbyMu.Lock()
		sb := d.standby
		d.standbyMu.Unlock()
		if sb == nil || sb.pid == not {
			return fmt.Errorf("the driver holds no standby other than %d", not)
		}
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", sb.pid))
		if err != nil || !strings.HasPrefix(string(status), "Name:\tcorral-standby\n") || strings.Contains(string(status), "\nState:\tZ") {
			return fmt.Errorf("standby %d does not run as corral-standby (%v)", sb.pid, err)
		}
		pid = sb.pid
		return nil
	})
	return pid
}

// waitExited waits until pid has exited (and been reaped).
func waitExited(t *testing.T, pid int) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, func() error {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("process %d is still there (%v)", pid, err)
		}
		return nil
	})
}

// A standby starts its sandbox's exec stage ahead, in a user namespace
// with no ids mapped; the sandbox handed to it runs its main process on
// that spare, mapped to the sandbox's id range, with the credentials a
// spare started for the sandbox gives (ids, groups, capabilities,
// no_new_privs, seccomp), and none of the host's.
func TestMainProcessOnSpareStartedAhead(t *testing.T) {
	d := newTestDriver(t, "corral.test")
	// Supplementary groups of the host's, which the standby and its spare
	// inherit: no process of a sandbox may keep them.
	if err := syscall.Setgroups([]int{0, 4}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Setgroups(nil) })
	// As root of its user namespace: the policy's user is not switched
	// to, so what the spare was is what the command gets.
	const asRoot = "version: 1\nprocess: {run_as_user: 0}\n"
	first := startSandbox(t, d, "first", asRoot)
	sb := waitStandby(t, d, 0)
	spare := waitSpare(t, sb, 0).host
	if m, err := os.ReadFile(fmt.Sprintf("/proc/%d/uid_map", spare)); err != nil || len(m) != 0 {
		t.Fatalf("the spare started ahead has uid_map %q (%v); want none yet", m, err)
	}
	second := startSandbox(t, d, "second", asRoot)
	if main := second.mainPID("sleep"); main != spare {
		t.Fatalf("the main process is %d; want the spare the standby started ahead, %d", main, spare)
	}
	o1, err := d.load(first.id)
	if err != nil {
		t.Fatal(err)
	}
	o2, err := d.load(second.id)
	if err != nil {
		t.Fatal(err)
	}
	if m, _ := os.ReadFile(fmt.Sprintf("/proc/%d/uid_map", spare)); strings.Fields(string(m))[1] != fmt.Sprint(o2.IDBase) {
		t.Errorf("the main process's uid_map is %q; want the sandbox's range at %d", m, o2.IDBase)
	}
	want, got := credentials(t, first.mainPID("sleep"), o1.IDBase), credentials(t, spare, o2.IDBase)
	if got != want {
		t.Errorf("main process on the spare started ahead:\n%s\nwant, as on a spare started for its sandbox:\n%s", got, want)
	}
}

// credentials returns what /proc/PID/status says of pid's ids (less base,
// its sandbox's first host id), groups, capabilities and protections.
func credentials(t *testing.T, pid int, base uint32) string {
	t.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(string(status), "\n") {
		key, value, _ := strings.Cut(line, ":")
		switch key {
		case "Uid", "Gid":
			var ids []string
			for _, f := range strings.Fields(value) {
				n, _ := strconv.ParseUint(f, 10, 32)
				ids = append(ids, fmt.Sprint(int64(n)-int64(base)))
			}
			out = append(out, key+": base + "+strings.Join(ids, " "))
		case "Groups", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp", "Seccomp_filters":
			out = append(out, key+": "+strings.TrimSpace(value))
		}
	}
	return strings.Join(out, "\n")
}
