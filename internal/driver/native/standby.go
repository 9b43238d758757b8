package native

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/driver/native/shim"
	"github.com/corral-sandbox/corral/internal/fdpass"
	"github.com/corral-sandbox/corral/internal/supervisor"
)

// A standby is a supervisor started ahead of its sandbox
// (shim.RunStandby), in new namespaces and a session of its own, waiting
// on a socket: a start hands it its bundle instead of waiting for a
// program start (a third of a native create→ready here). It belongs to no
// sandbox until then, holds no lock and no cgroup, and exits when its
// socket closes (the driver closed, or the gateway gone). The driver keeps
// at most one, started after a start has answered, off its path.
type standby struct {
	pid int
	ctl *os.File // the driver's end of its socket
}

// supervisorCmd is a supervisor's command (argv of supervisor's) in the
// namespaces every supervisor starts in.
func (d *Driver) supervisorCmd(argv []string) *exec.Cmd {
	cmd := exec.Command(d.opts.Supervisor, argv[1:]...)
	cmd.Args[0] = argv[0]
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Cloneflags: namespaces}
	if os.Geteuid() != 0 {
		cmd.SysProcAttr.Cloneflags |= unix.CLONE_NEWUSER
		cmd.SysProcAttr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}}
		cmd.SysProcAttr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}}
	}
	return cmd
}

// startSupervisor starts the supervisor of the bundle at dir with its
// ready pipe, lock and log (shim.RunSandbox's descriptors): the standby, if
// there is one to take it, else a new one. It returns its pid.
func (d *Driver) startSupervisor(dir string, ready, lock, log *os.File) (int, error) {
	if sb := d.takeStandby(); sb != nil {
		err := shim.Handoff(sb.ctl, dir, ready, lock, log)
		if err == nil {
			return sb.pid, nil
		}
		if !errors.Is(err, fdpass.ErrNotSent) {
			// It may hold a part of the handoff: it is not started twice.
			return 0, fmt.Errorf("hand the sandbox to a standby supervisor: %w", err)
		}
		// Gone before it was handed anything (killed, say): start one.
	}
	cmd := d.supervisorCmd(supervisor.SandboxArgv(dir))
	cmd.Stdout, cmd.Stderr = log, log
	cmd.ExtraFiles = []*os.File{ready, lock} // shim.ReadyFD, shim.LockFD
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	pid := cmd.Process.Pid
	reap(cmd.Process)
	return pid, nil
}

// takeStandby returns the standby, if any, for one start.
func (d *Driver) takeStandby() *standby {
	d.standbyMu.Lock()
	defer d.standbyMu.Unlock()
	sb := d.standby
	d.standby = nil
	return sb
}

// A standby starts once the driver's calls have left standbyIdle of quiet
// (its program start is ~10 ms of CPU, which would land on a call that
// follows the start at once: a stop, a delete), or after standbyWait.
const (
	standbyIdle = 20 * time.Millisecond
	standbyWait = time.Second
)

// refillStandby starts a standby in the background unless there is one
// (or one is starting), or the driver is closed.
func (d *Driver) refillStandby() {
	d.standbyMu.Lock()
	defer d.standbyMu.Unlock()
	if d.standby != nil || d.standbyStarting || d.closed {
		return
	}
	d.standbyStarting = true
	go func() {
		d.waitIdle(standbyIdle, standbyWait)
		sb, err := d.startStandby()
		d.standbyMu.Lock()
		defer d.standbyMu.Unlock()
		d.standbyStarting = false
		switch {
		case err != nil: // the next start starts its own, and says why it cannot
		case d.closed:
			sb.ctl.Close()
		default:
			d.standby = sb
		}
	}()
}

// startStandby starts a standby supervisor.
func (d *Driver) startStandby() (*standby, error) {
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	ours, theirs := os.NewFile(uintptr(pair[0]), "standby"), os.NewFile(uintptr(pair[1]), "standby")
	defer theirs.Close()
	// Its sandbox's exec stage ahead, when sandboxes get id ranges: a
	// driver that runs as root.
	cmd := d.supervisorCmd(supervisor.StandbyArgv(os.Geteuid() == 0))
	cmd.ExtraFiles = []*os.File{theirs} // shim.StandbyFD
	if err := cmd.Start(); err != nil {
		ours.Close()
		return nil, fmt.Errorf("start a standby supervisor: %w", err)
	}
	pid := cmd.Process.Pid
	reap(cmd.Process)
	return &standby{pid: pid, ctl: ours}, nil
}

// closeStandby lets the standby go (it exits) and starts no other.
func (d *Driver) closeStandby() {
	d.standbyMu.Lock()
	defer d.standbyMu.Unlock()
	d.closed = true
	if d.standby != nil {
		d.standby.ctl.Close()
		d.standby = nil
	}
}
