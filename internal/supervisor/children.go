package supervisor

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/cgroups"
	"github.com/corral-sandbox/corral/internal/control"
)

// Children starts processes through the exec stage and hands their exit
// statuses to whoever started them; the supervisor reaps every process.
type Children struct {
	Dir      string        // their working directory; "" is the supervisor's
	DropCaps bool          // they keep only keptCapabilities
	IDs      *IDRange      // their user namespace's host ids, if they get one
	Procs    cgroups.Procs // the sandbox's cgroup, when it has one
	// Pids, when set, is the pids limit the sandbox's processes count
	// against: an exec is refused in a line when it is nearly reached.
	Pids *cgroups.Pids
	// Bin is the corral binary whose exec stage starts them; "" is the
	// caller's own, through /proc.
	Bin string
	// Spare keeps an exec stage started ahead (spare.go): each Start
	// hands its command to it, and starts the next one.
	Spare   bool
	mu      sync.Mutex
	waiters map[int]chan int
	spare   *spare // the next Start's, when Spare
	// spareStarting is set while StartSpare starts one: two calls at once
	// (an exec's end and the timer of a long one) made two, one wasted.
	spareStarting bool
}

// SetProcs makes procs the cgroup of the processes Start starts, and
// moves the waiting spare, if any, into it (a spare started before the
// cgroup was made runs nothing before it is asked).
func (c *Children) SetProcs(procs cgroups.Procs) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.Procs = procs
	if c.spare == nil {
		return nil
	}
	if err := procs.Add(c.spare.pid); err != nil {
		c.spare.discard()
		c.spare = nil
		return err
	}
	return nil
}

// Start runs command through the exec stage in its own session. The exec
// stage waits until the process is in the sandbox's cgroup before it runs
// the command, and start waits until the command runs: applied is what the
// exec stage applied of the policy, failed why it could not run the
// command (the process then exits 126 or 127).
func (c *Children) Start(command, env []string, stdio []*os.File, tty bool) (pid int, done <-chan int, applied string, failed, err error) {
	pid, done, msg := c.startOnSpare(command, env, stdio, tty)
	if done == nil {
		if pid, done, msg, err = c.startCold(command, env, stdio, tty); err != nil {
			return 0, nil, "", nil, err
		}
	}
	for _, line := range strings.Split(msg, "\n") {
		if v, ok := strings.CutPrefix(line, "applied: "); ok {
			applied = v
		}
		if v, ok := strings.CutPrefix(line, "error: "); ok {
			failed = errors.New(v)
		}
	}
	if c.Spare {
		done = c.refillAfter(done)
	}
	return pid, done, applied, failed, nil
}

// ExecStarter starts an exec's command through the exec stage, in base's
// environment and the request's (control.ExecEnv), in its own process
// group, which its kill kills.
func (c *Children) ExecStarter(base []string) control.Starter {
	return func(req control.Request, stdio []*os.File) (int, <-chan int, func(), error) {
		if err := c.roomForExec(); err != nil {
			return 0, nil, nil, err
		}
		pid, done, _, _, err := c.Start(req.Command, control.ExecEnv(base, req), stdio, req.TTY) // a command that cannot run exits 126 or 127
		if err != nil {
			return 0, nil, nil, err
		}
		return pid, done, func() { _ = unix.Kill(-pid, unix.SIGKILL) }, nil
	}
}

// stageTasks is about how many tasks an exec stage needs to start (its Go
// runtime's threads) before its command runs as one of them.
const stageTasks = 8

// roomForExec says why an exec cannot start, when the sandbox is so near
// its pids limit (Pids) that the exec stage could not start its
// threads: one line, instead of the Go runtime's crash of the stage.
func (c *Children) roomForExec() error {
	if c.Pids == nil {
		return nil
	}
	if free, ok := c.Pids.Free(); ok && free < stageTasks {
		return fmt.Errorf("the sandbox is at its pids limit (%d more tasks allowed; an exec needs about %d): end some of its processes, or raise limits.pids", max(free, 0), stageTasks)
	}
	return nil
}

// spareAnswerWait bounds how long a spare may take from its request to
// its command (a few milliseconds here). It kills a spare that has not
// run its command by then, which could in theory have just done so.
const spareAnswerWait = 5 * time.Second

// spareRefill is how long a command runs before the next spare starts
// beside it, if it has not ended by then.
const spareRefill = 50 * time.Millisecond

// refillAfter starts the next spare once the command whose end done
// reports has ended, or has run for spareRefill: not while a short
// command runs, where the spare's program start would compete with it
// for the CPU and with the reaper for the lock. It returns a channel that
// reports the same end.
func (c *Children) refillAfter(done <-chan int) <-chan int {
	ended := make(chan int, 1)
	go func() {
		t := time.NewTimer(spareRefill)
		defer t.Stop()
		select {
		case code := <-done:
			ended <- code
			c.StartSpare()
			return
		case <-t.C:
			go c.StartSpare()
		}
		ended <- <-done
	}()
	return ended
}

// startOnSpare runs command on the spare, if there is one, and returns
// its report. done is nil when there was none, or when it died before it
// applied anything (killed, say): then nothing ran, and the caller starts
// cold.
func (c *Children) startOnSpare(command, env []string, stdio []*os.File, tty bool) (int, <-chan int, string) {
	sp := c.takeSpare()
	if sp == nil {
		return 0, nil, ""
	}
	req := spareRequest{Command: command, Env: env, TTY: tty, Stdio: len(stdio), Dir: c.Dir}
	var err error
	if req.Dir == "" {
		req.Dir, err = os.Getwd()
	}
	if err == nil {
		req.Root, err = rootOf("/")
	}
	var report, reported *os.File
	if err == nil {
		report, reported, err = os.Pipe()
	}
	if err == nil {
		defer report.Close()
		err = sp.ask(req, append(stdio[:len(stdio):len(stdio)], reported))
		reported.Close()
	}
	var msg []byte
	if err == nil {
		// A spare that does not answer (a workload that runs as root
		// stopped it, say) is killed, and the exec starts cold.
		stuck := time.AfterFunc(spareAnswerWait, func() { _ = unix.Kill(sp.pid, unix.SIGKILL) })
		msg, _ = io.ReadAll(report) // ends when the command runs, or the exec stage gives up
		stuck.Stop()
	}
	if len(msg) == 0 { // it says what it applied before it runs anything
		sp.discard()
		return 0, nil, ""
	}
	return sp.pid, sp.done, string(msg)
}

// startCold starts the exec stage for command and returns its report.
func (c *Children) startCold(command, env []string, stdio []*os.File, tty bool) (int, <-chan int, string, error) {
	gate, release, err := os.Pipe()
	if err != nil {
		return 0, nil, "", err
	}
	defer gate.Close()
	defer release.Close()
	report, reported, err := os.Pipe()
	if err != nil {
		return 0, nil, "", err
	}
	defer report.Close()
	defer reported.Close()
	n := len(stdio)
	argv := ExecArgv("corral", ExecStage{WaitFD: n, ReportFD: n + 1, DropCaps: c.DropCaps}, command)
	pid, done, err := c.startLocked(argv, c.procAttr(c.Dir, env, append(stdio[:n:n], gate, reported), tty))
	if err != nil {
		return 0, nil, "", err
	}
	release.Close() // go ahead
	reported.Close()
	msg, _ := io.ReadAll(report) // ends when the command runs, or the exec stage gives up
	return pid, done, string(msg), nil
}

// StartSpare starts the next Start's spare, when Spare is set, unless
// there is one; without one, that Start starts cold. Start calls it (after
// itself); a supervisor calls it ahead of its first Start, as soon as its
// processes have their cgroup: the spare starts in the supervisor's root
// and working directory, and goes where the supervisor's root goes (a
// pivot_root moves both when they are the old root, "/" here); it runs
// its command only in the root its request names (spareRequest.Root), in
// the request's directory.
func (c *Children) StartSpare() { c.startSpare(false) }

// StartSpareAhead starts the spare before its user namespace's ids are
// known (a standby supervisor's, before it has a sandbox): in a user
// namespace of its own with no ids mapped, keeping the capabilities it has
// there across its exec (as ambient ones) so that it can become the root
// of that namespace once AdoptSpare has mapped it. Until its request it
// runs its own program and nothing else, with the ids it was started with
// and no capability outside that namespace.
func (c *Children) StartSpareAhead() { c.startSpare(true) }

func (c *Children) startSpare(ahead bool) {
	if !c.Spare {
		return
	}
	c.mu.Lock()
	busy := c.spare != nil || c.spareStarting
	if !busy {
		c.spareStarting = true
	}
	c.mu.Unlock()
	if busy {
		return
	}
	defer func() {
		c.mu.Lock()
		c.spareStarting = false
		c.mu.Unlock()
	}()
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return
	}
	ours, theirs := os.NewFile(uintptr(pair[0]), "spare"), os.NewFile(uintptr(pair[1]), "spare")
	defer theirs.Close()
	null, err := os.Open(os.DevNull)
	if err != nil {
		ours.Close()
		return
	}
	defer null.Close()
	attr := c.procAttr("/", spareEnv, []*os.File{null, null, null, theirs}, false)
	if ahead {
		attr.Sys = &syscall.SysProcAttr{Setsid: true, Cloneflags: unix.CLONE_NEWUSER, AmbientCaps: allCapabilities()}
	}
	argv := ExecArgv("corral", ExecStage{SpareFD: 3, DropCaps: c.DropCaps, Unmapped: ahead}, nil)
	pid, done, err := c.startLocked(argv, attr)
	if err != nil {
		ours.Close()
		return
	}
	c.mu.Lock()
	c.spare = &spare{pid: pid, done: done, ctl: ours, unmapped: ahead}
	c.mu.Unlock()
}

// AdoptSpare makes a spare started ahead (StartSpareAhead) one of these
// children: it maps the spare's user namespace to IDs, as procAttr maps an
// exec stage's. Without IDs, or Spare, it lets the spare go (StartSpare
// starts one as these children need); so it does when the mapping fails,
// and returns why.
func (c *Children) AdoptSpare() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	sp := c.spare
	if sp == nil || !sp.unmapped {
		return nil
	}
	var err error
	if c.Spare && c.IDs != nil {
		if err = mapIDs(sp.pid, *c.IDs); err == nil {
			sp.unmapped = false
			return nil
		}
	}
	sp.discard()
	c.spare = nil
	return err
}

// spareEnv is a spare's environment until its request gives it the
// command's: one P for its Go runtime, which does one thing at a time
// (on 2 CPUs the second P cost its start 56 of ~390 page faults, 0.8 ms
// of CPU).
var spareEnv = []string{"GOMAXPROCS=1"}

// takeSpare returns the spare, if any, for one Start.
// A spare started ahead that no AdoptSpare mapped could not become its
// namespace's root: it is let go, and that Start starts cold.
func (c *Children) takeSpare() *spare {
	c.mu.Lock()
	defer c.mu.Unlock()
	sp := c.spare
	c.spare = nil
	if sp != nil && sp.unmapped {
		sp.discard()
		return nil
	}
	return sp
}

// procAttr is how an exec stage (cold or spare) is started: in its own
// session, in dir and the sandbox's user namespace.
func (c *Children) procAttr(dir string, env []string, files []*os.File, tty bool) *os.ProcAttr {
	attr := &os.ProcAttr{Dir: dir, Env: env, Files: files,
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
	return attr
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
