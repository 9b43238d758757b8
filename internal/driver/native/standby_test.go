package native

import (
	"context"
	"errors"
	"fmt"
	"os"
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
