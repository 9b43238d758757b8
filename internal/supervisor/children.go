package supervisor

import (
	"cmp"
	"errors"
	"io"
	"os"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/cgroups"
)

// Children starts processes through the exec stage and hands their exit
// statuses to whoever started them; the supervisor reaps every process.
type Children struct {
	Dir      string        // their working directory; "" is the supervisor's
	DropCaps bool          // they keep only keptCapabilities
	IDs      *IDRange      // their user namespace's host ids, if they get one
	Procs    cgroups.Procs // the sandbox's cgroup, when it has one
	// Bin is the corral binary whose exec stage starts them; "" is the
	// caller's own, through /proc.
	Bin     string
	mu      sync.Mutex
	waiters map[int]chan int
}

// Start runs command through the exec stage in its own session. The exec
// stage waits until the process is in the sandbox's cgroup before it runs
// the command, and start waits until the command runs: applied is what the
// exec stage applied of the policy, failed why it could not run the
// command (the process then exits 126 or 127).
func (c *Children) Start(command, env []string, stdio []*os.File, tty bool) (pid int, done <-chan int, applied string, failed, err error) {
	gate, release, err := os.Pipe()
	if err != nil {
		return 0, nil, "", nil, err
	}
	defer gate.Close()
	defer release.Close()
	report, reported, err := os.Pipe()
	if err != nil {
		return 0, nil, "", nil, err
	}
	defer report.Close()
	defer reported.Close()
	n := len(stdio)
	argv := ExecArgv("corral", ExecStage{WaitFD: n, ReportFD: n + 1, DropCaps: c.DropCaps}, command)
	attr := &os.ProcAttr{Dir: c.Dir, Env: env, Files: append(stdio[:n:n], gate, reported),
		Sys: &syscall.SysProcAttr{Setsid: true, Setctty: tty, Ctty: 0}}
	if r := c.IDs; r != nil {
		// Its own user namespace, mapped to the sandbox's host ids: root
		// inside is an unprivileged id outside, and no capability it has
		// reaches a file or namespace of the host.
		m := []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(r.Base), Size: int(r.Size)}}
		attr.Sys.Cloneflags = unix.CLONE_NEWUSER
		attr.Sys.UidMappings, attr.Sys.GidMappings = m, m
		attr.Sys.GidMappingsEnableSetgroups = true
		attr.Sys.Credential = &syscall.Credential{Uid: 0, Gid: 0} // become that root before the exec
	}
	if pid, done, err = c.startLocked(argv, attr); err != nil {
		return 0, nil, "", nil, err
	}
	release.Close() // go ahead
	reported.Close()
	msg, _ := io.ReadAll(report) // ends when the command runs, or the exec stage gives up
	for _, line := range strings.Split(string(msg), "\n") {
		if v, ok := strings.CutPrefix(line, "applied: "); ok {
			applied = v
		}
		if v, ok := strings.CutPrefix(line, "error: "); ok {
			failed = errors.New(v)
		}
	}
	return pid, done, applied, failed, nil
}

func (c *Children) startLocked(argv []string, attr *os.ProcAttr) (int, <-chan int, error) {
	c.mu.Lock()
	defer c.mu.Unlock() // held until registered: the reaper waits for it
	p, err := os.StartProcess(cmp.Or(c.Bin, "/proc/self/exe"), argv, attr)
	if err != nil {
		return 0, nil, err
	}
	pid := p.Pid
	_ = p.Release() // the reaper waits for it, not os
	done := make(chan int, 1)
	if c.waiters == nil {
		c.waiters = map[int]chan int{}
	}
	c.waiters[pid] = done
	if err := c.Procs.Add(pid); err != nil {
		_ = unix.Kill(pid, unix.SIGKILL)
		return 0, nil, err
	}
	return pid, done, nil
}

// Reap collects every exited child.
func (c *Children) Reap() {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if err == unix.EINTR {
			continue
		}
		if pid <= 0 || err != nil {
			return
		}
		c.mu.Lock()
		done := c.waiters[pid]
		delete(c.waiters, pid)
		c.mu.Unlock()
		if done != nil {
			done <- exitStatus(ws)
		}
	}
}

func exitStatus(ws unix.WaitStatus) int {
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

// IDRange is a range of host user and group ids.
type IDRange struct {
	Base uint32 `json:"base"`
	Size uint32 `json:"size"`
}

// Host is the host id of id inside the range's user namespace.
func (r IDRange) Host(id int) int { return int(r.Base) + id }
