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

	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/policy"
	"github.com/corral-sandbox/corral/internal/testenv"
)

// A start leaves a standby supervisor behind, with the main process's
// exec stage made ahead for the id range the next sandbox gets; the next
// start hands its sandbox to it (the sandbox's supervisor is that process,
// its main process that exec stage); a start of a sandbox of another range
// (a new incarnation of the first) runs on an exec stage of its own range,
// never the one made ahead; a standby killed from outside only makes the
// next start start its own; a closed driver's standby exits.
func TestStartOnStandby(t *testing.T) {
	d := newTestDriver(t, "corral.test")
	first := startSandbox(t, d, "first", "")
	sb := waitStandby(t, 0)
	ahead := waitSpareOf(t, sb)
	second := startSandbox(t, d, "second", "")
	if sup, err := readPID(d.bundle(second.id, 1)); err != nil || sup != sb {
		t.Fatalf("the second sandbox's supervisor is %d (%v); want the standby, %d", sup, err, sb)
	}
	if main := second.mainPID("sleep"); main != ahead {
		t.Errorf("the second sandbox's main process is %d; want the exec stage made ahead, %d", main, ahead)
	}
	checkRange(t, d, second)
	if code, out, errOut := second.exec("echo", "hi"); code != 0 || out != "hi\n" {
		t.Fatalf("exec in the sandbox a standby runs: exit %d, %q, %s", code, out, errOut)
	}

	next := waitStandby(t, sb)
	aheadNext := waitSpareOf(t, next)
	if err := d.Stop(ctx(t), driver.Ref{ID: first.id, Generation: 1}, driver.StopOptions{Timeout: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	first.gen = 2
	if err := d.Create(ctx(t), driver.Spec{ID: first.id, Name: "first", Generation: 2, Image: HostImage, Command: []string{"sleep", "3600"}, Policy: policy.Default()}); err != nil {
		t.Fatal(err)
	}
	if err := d.Start(ctx(t), driver.Ref{ID: first.id, Generation: 2}); err != nil {
		t.Fatal(err)
	}
	if sup, err := readPID(d.bundle(first.id, 2)); err != nil || sup != next {
		t.Fatalf("the first sandbox's new supervisor is %d (%v); want the standby, %d", sup, err, next)
	}
	if main := first.mainPID("sleep"); main == aheadNext {
		t.Errorf("the first sandbox's main process runs on the exec stage made for another id range")
	}
	checkRange(t, d, first)

	last := waitStandby(t, next)
	if err := syscall.Kill(last, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitExited(t, last)
	third := startSandbox(t, d, "third", "")
	if sup, err := readPID(d.bundle(third.id, 1)); err != nil || sup == last {
		t.Fatalf("the third sandbox's supervisor is %d (%v); want a new one, not the killed standby", sup, err)
	}
	checkRange(t, d, third)
	final := waitStandby(t, last)
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	waitExited(t, final)
	if err := d.Delete(context.Background(), third.id); err != nil { // a closed driver still deletes
		t.Fatal(err)
	}
}

// checkRange checks that the sandbox's main process runs in a user
// namespace of the sandbox's own host id range.
func checkRange(t *testing.T, d *Driver, s *testSandbox) {
	t.Helper()
	o, err := d.load(s.id)
	if err != nil {
		t.Fatal(err)
	}
	uidMap, err := os.ReadFile(fmt.Sprintf("/proc/%d/uid_map", s.mainPID("sleep")))
	if err != nil {
		t.Fatal(err)
	}
	if f := strings.Fields(string(uidMap)); len(f) != 3 || f[0] != "0" || f[1] != strconv.FormatUint(uint64(o.IDBase), 10) {
		t.Errorf("sandbox %s's main process maps ids %q; want 0 to its range, %d", s.id, uidMap, o.IDBase)
	}
}

// waitSpareOf waits for the one spare exec stage that supervisor pid
// made, and returns its pid.
func waitSpareOf(t *testing.T, pid int) int {
	t.Helper()
	return waitSpare(t, pid, 0).host
}

// waitStandby waits for the one standby supervisor of this process other
// than not, and returns its pid.
func waitStandby(t *testing.T, not int) int {
	t.Helper()
	return waitProcess(t, "standby supervisors", not, func(_, status string) bool {
		return strings.HasPrefix(status, "Name:\tcorral-standby\n") && strings.Contains(status, fmt.Sprintf("\nPPid:\t%d\n", os.Getpid()))
	})
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
