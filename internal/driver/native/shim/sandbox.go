package shim

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/cgroups"
	"github.com/corral-sandbox/corral/internal/control"
	"github.com/corral-sandbox/corral/internal/netns"
	"github.com/corral-sandbox/corral/internal/supervisor"
)

// DefaultStopTimeout is how long the main process gets between SIGTERM and
// SIGKILL when the supervisor itself is sent SIGTERM.
const DefaultStopTimeout = 10 * time.Second

// ReadyFD is the descriptor a native supervisor reports readiness on: "ok"
// once the main process runs; else ReadyCommandFailed or ReadyFailed and
// the reason.
const ReadyFD = 3

// LockFD is the bundle's lock (see Lock), taken by the gateway before it
// starts the supervisor and held by the supervisor from its first
// instruction to its exit: no supervisor ever lives unseen.
const LockFD = 4

// The prefixes of a failure on ReadyFD: the main command cannot run (a
// missing or non-executable file), or anything else failed.
const (
	ReadyCommandFailed = "command: "
	ReadyFailed        = "error: "
)

// commandError is a main command that the exec stage could not run.
type commandError struct{ error }

// DefaultPath is the PATH of processes in a native sandbox.
const DefaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// RunSandbox is PID 1 of a native sandbox: started by the native driver in
// new namespaces with the bundle directory, it joins the sandbox's cgroup,
// builds the root file system, starts the main process, serves the control
// socket and exits when the main process has ended, after recording how.
func RunSandbox(dir string) int { return runSandbox(dir, new(supervisor.Children)) }

// runSandbox is RunSandbox with the children a standby may have started
// for it (a spare started ahead).
func runSandbox(dir string, children *supervisor.Children) int {
	// Inherited, so not closed on exec: the sandbox's processes get neither.
	unix.CloseOnExec(ReadyFD)
	unix.CloseOnExec(LockFD)
	ready := os.NewFile(ReadyFD, "ready")
	s, err := setUp(Bundle{Dir: dir}, children)
	if err != nil {
		fmt.Fprintf(os.Stderr, "corral supervise: %v\n", err)
		// Never started: the incarnation is still just created.
		if s != nil { // its bundle is open, and maybe no longer reachable by path
			_ = unix.Unlinkat(int(s.bundle.Fd()), PIDFile, 0)
		} else {
			_ = os.Remove(Bundle{Dir: dir}.Path(PIDFile))
		}
		prefix := ReadyFailed
		if errors.As(err, new(commandError)) {
			prefix = ReadyCommandFailed
		}
		fmt.Fprintf(ready, "%s%s\n", prefix, strings.ReplaceAll(err.Error(), "\n", " "))
		return 1
	}
	fmt.Fprintln(ready, "ok")
	ready.Close()
	return s.run()
}

// sandboxSupervisor is the state of a running native supervisor.
type sandboxSupervisor struct {
	cfg      SandboxConfig
	lock     *os.File // held while the supervisor lives
	bundle   *os.File // the bundle directory, for the exit file after the pivot
	sigs     chan os.Signal
	stops    chan control.Request
	children *supervisor.Children
	gvisor   *gvisor // set on the gVisor tier
	main     int
	mainDone <-chan int
	outputs  sync.WaitGroup // the copies of the main process's output

	// A checkpoint's hand-over of the main process (checkpoint.go): its
	// end, while checkpointing, goes to mainEnded, and the restored one
	// comes back on mains.
	mainEnded chan int
	mains     chan mainProc
	stopNow   chan struct{} // closed by the first stop request
	stopOnce  sync.Once

	mu            sync.Mutex
	stopping      bool
	checkpointing bool
	paused        *memoryPause // set while a pause holds the processes checkpointed out
}

// setUp prepares the sandbox and starts its main process. On failure it
// returns what it set up so far (nil before the bundle is open), so that
// the caller can undo what marks the incarnation as started. children are
// the sandbox's processes' (a standby's may hold a spare started ahead).
func setUp(b Bundle, children *supervisor.Children) (*sandboxSupervisor, error) {
	cfg, err := b.ReadConfig()
	if err != nil {
		return nil, err
	}
	s := &sandboxSupervisor{cfg: cfg, sigs: make(chan os.Signal, 32), stops: make(chan control.Request, 4), children: children,
		mainEnded: make(chan int, 1), mains: make(chan mainProc, 1), stopNow: make(chan struct{})}
	if cfg.Runsc != "" {
		// Its children are runsc's processes, which the host's root runs.
		s.gvisor = newGVisor(cfg, b.Dir)
		s.children.Dir, s.children.DropCaps, s.children.IDs, s.children.Spare = "", false, nil, false
	} else {
		s.children.Dir, s.children.DropCaps, s.children.IDs = cmp.Or(cfg.Dir, "/sandbox"), true, cfg.IDs
		s.children.Spare = true // an exec needs no Go program start of its own
	}
	signal.Notify(s.sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGCHLD)
	s.lock = os.NewFile(LockFD, "lock")
	if s.bundle, err = os.Open(b.Dir); err != nil {
		return nil, err
	}
	if pid, err := hostPID(); err == nil {
		// No fsync: it is rewritten at every start, and read only while
		// the lock says this supervisor lives.
		_ = os.WriteFile(b.Path(PIDFile), []byte(strconv.Itoa(pid)+"\n"), 0o644)
	}
	if s.children.Spare {
		// The main process's exec stage: a standby's started ahead, or its
		// program starts now, beside the set-up (StartSpare says how it
		// comes into the root, and the cgroup takes it before it is asked
		// anything).
		if err := ownProc(); err != nil {
			return s, err
		}
	}
	if err := s.children.AdoptSpare(); err != nil {
		fmt.Fprintf(os.Stderr, "corral supervise: the spare started ahead: %v\n", err)
	}
	s.children.StartSpare()
	if err := s.cgroups(); err != nil {
		return s, err
	}
	stdout, err := s.output(StdoutFile)
	if err != nil {
		return s, err
	}
	stderr, err := s.output(StderrFile)
	if err != nil {
		return s, err
	}
	null, err := os.Open(os.DevNull)
	if err != nil {
		return s, err
	}
	ln, err := control.Listen(cfg.Socket)
	if err != nil {
		return s, err
	}
	if err := setHostname(cfg.Hostname); err != nil {
		return s, err
	}
	if err := netns.LoopbackUp(); err != nil {
		return s, err
	}
	if cfg.IDs != nil || cfg.Runsc != "" {
		// Root of the sandbox's user namespace (or gVisor's sentry) is no
		// root of its network namespace: let it bind the ports below 1024
		// as root could.
		if err := os.WriteFile("/proc/sys/net/ipv4/ip_unprivileged_port_start", []byte("0"), 0); err != nil {
			return s, fmt.Errorf("open the low ports: %w", err)
		}
	}
	root := b.Path("root")
	if err := os.MkdirAll(root, 0o755); err != nil {
		return s, err
	}
	pid, done, applied, err := s.startMain(root, []*os.File{null, stdout, stderr})
	if err != nil {
		return s, err
	}
	// Not synced: it describes this supervisor, which a crash of the
	// machine ends too, and is read only while the supervisor lives.
	if err := s.writeBundleFile(supervisor.ProtectionsFile, []byte(applied), false); err != nil {
		return s, fmt.Errorf("record the protections: %w", err)
	}
	s.main, s.mainDone = pid, done
	for _, f := range []*os.File{null, stdout, stderr} {
		f.Close()
	}
	go s.serve(ln)
	return s, nil
}

// startMain builds the root file system at root and starts the main
// process on stdio once the egress proxy answers: through the exec stage
// after the pivot into the root, or, on gVisor, as the init of a runsc
// container of that root. It returns what the exec stage applied.
func (s *sandboxSupervisor) startMain(root string, stdio []*os.File) (int, <-chan int, string, error) {
	if s.gvisor == nil {
		if err := enterRoot(s.cfg, root); err != nil {
			return 0, nil, "", err
		}
		supervisor.AwaitEgress(s.cfg.Env)
		pid, done, applied, failed, err := s.children.Start(s.cfg.Command, s.cfg.Env, stdio, false)
		if err != nil {
			return 0, nil, "", fmt.Errorf("start %s: %w", s.cfg.Command[0], err)
		}
		if failed != nil {
			return 0, nil, "", commandError{failed}
		}
		go s.children.StartSpare() // the first exec's: the main process runs on
		return pid, done, applied, nil
	}
	if err := buildRoot(s.cfg, root); err != nil {
		return 0, nil, "", err
	}
	// runsc reads its own state through /proc by the pids it sees.
	if err := mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return 0, nil, "", err
	}
	if err := s.gvisor.writeSpec(s.cfg, root); err != nil {
		return 0, nil, "", fmt.Errorf("write the OCI bundle: %w", err)
	}
	supervisor.AwaitEgress(s.cfg.Env)
	g := s.gvisor
	if image, ok := g.restoreImage(s.bundle.Name()); ok {
		if !s.cfg.Checkpointable {
			return 0, nil, "", errNotCheckpointable
		}
		m, err := g.restore(s, image, stdio)
		if err != nil {
			return 0, nil, "", err
		}
		// Its memory is in the sandbox now; a later start boots afresh.
		_ = os.RemoveAll(image)
		return m.pid, m.done, strings.Join([]string{restoredProtection, g.protections()}, "; "), nil
	}
	pid, done, _, failed, err := s.children.Start(g.command("run", "--bundle", filepath.Join(g.dir, "oci"), g.id), hostEnv, stdio, false)
	if err == nil && failed != nil {
		err = failed
	}
	if err != nil {
		return 0, nil, "", fmt.Errorf("run runsc: %w", err)
	}
	applied, err := g.awaitInit(s.children, done)
	if err != nil {
		return 0, nil, "", err
	}
	protections := []string{g.protections()}
	if applied != "" {
		protections = append([]string{applied}, protections...)
	}
	if s.cfg.Files != nil {
		protections = append(protections, FileListMounts)
	}
	return pid, done, strings.Join(protections, "; "), nil
}

// signalMain sends the main process sig: on gVisor, through runsc to the
// container's init, which passes it on.
func (s *sandboxSupervisor) signalMain(sig unix.Signal) {
	if s.gvisor == nil {
		_ = unix.Kill(s.main, sig)
		return
	}
	s.gvisor.run(s, "kill", s.gvisor.id, strconv.Itoa(int(sig)))
}

// output returns the write end of a pipe whose output goes, capped and
// rotated, to the bundle file name.
func (s *sandboxSupervisor) output(name string) (*os.File, error) {
	l, err := newRotatingLog(int(s.bundle.Fd()), name, max(s.cfg.LogMaxBytes/2, 2))
	if err != nil {
		return nil, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		l.f.Close()
		return nil, err
	}
	s.outputs.Add(1)
	go copyOutput(r, l, &s.outputs)
	return w, nil
}

// ErrLocked is returned by Lock when a supervisor holds the lock.
var ErrLocked = errors.New("a supervisor of this incarnation lives")

// Lock takes an incarnation's lock at path. Whoever holds an open
// description of it (the supervisor, which inherits it) holds the lock: it
// goes with the last descriptor, whatever becomes of pids.
func Lock(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0}
	if err := unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &lk); err != nil {
		f.Close()
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EACCES) {
			return nil, fmt.Errorf("%s: %w", path, ErrLocked)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return f, nil
}

// Alive reports whether a supervisor holds the lock at path.
func Alive(path string) (bool, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0}
	if err := unix.FcntlFlock(f.Fd(), unix.F_OFD_GETLK, &lk); err != nil {
		return false, fmt.Errorf("test lock %s: %w", path, err)
	}
	return lk.Type != unix.F_UNLCK, nil
}

// cgroups puts the supervisor into a cgroup of its own and makes the
// sandbox's, with the limits, for the processes it starts: a workload that
// exhausts its limits cannot starve the supervisor.
func (s *sandboxSupervisor) cgroups() error {
	if s.cfg.Cgroup == "" {
		return nil
	}
	l := s.cfg.Limits
	pids := l.PidsMax()
	if s.gvisor != nil {
		pids = taskLimit(l)*hostPidsPerTask + hostPidsBase
	}
	err := joinCgroup(s.cfg.Cgroup + "/supervisor")
	if err == nil {
		err = cgroups.Create(s.cfg.Cgroup+"/sandbox", cgroups.Limits{MemoryBytes: l.MemoryBytes, CPUMillis: l.CPUMillis, Pids: pids})
	}
	var procs cgroups.Procs
	if err == nil {
		procs, err = cgroups.OpenProcs(s.cfg.Cgroup + "/sandbox")
	}
	if err == nil {
		err = s.children.SetProcs(procs)
	}
	if err == nil {
		s.children.Pids, err = cgroups.OpenPids(s.cfg.Cgroup + "/sandbox")
	}
	if err != nil && l.MemoryBytes == 0 && l.CPUMillis == 0 && l.Pids == 0 {
		// No limits asked for: a cgroup (and its default pids cap) is a
		// convenience, not a promise.
		fmt.Fprintf(os.Stderr, "corral supervise: no cgroup of its own (%v)\n", err)
		return nil
	}
	return err
}

func joinCgroup(name string) error {
	if err := cgroups.Create(name, cgroups.Limits{}); err != nil {
		return err
	}
	procs, err := cgroups.OpenProcs(name)
	if err != nil {
		return err
	}
	defer procs.Close()
	return procs.Add(0)
}

// run waits for the main process, handling stop requests and signals, and
// records its end.
func (s *sandboxSupervisor) run() int {
	var (
		kill    <-chan time.Time
		stopped bool
	)
	for {
		select {
		case code := <-s.mainDone:
			if s.handOver(code) {
				s.mainDone = nil // until the checkpoint hands back the restored one
				continue
			}
			s.finish(Exit{Code: code, Stopped: stopped})
			return 0
		case m := <-s.mains:
			s.main, s.mainDone = m.pid, m.done
		case req := <-s.stops:
			stopped = true
			if req.Force {
				s.killAll()
				continue
			}
			if kill == nil {
				s.signalMain(unix.SIGTERM)
				kill = time.After(time.Duration(req.TimeoutMillis) * time.Millisecond)
			}
		case <-kill:
			s.killAll()
		case sig := <-s.sigs:
			if sig == syscall.SIGCHLD {
				s.children.Reap()
				continue
			}
			s.requestStop(control.Request{Op: control.OpStop, TimeoutMillis: DefaultStopTimeout.Milliseconds()})
		}
	}
}

// requestStop marks the supervisor as stopping and hands the request to run.
func (s *sandboxSupervisor) requestStop(req control.Request) {
	s.mu.Lock()
	s.stopping = true
	s.mu.Unlock()
	s.stopOnce.Do(func() { close(s.stopNow) })
	select {
	case s.stops <- req:
	default: // a stop is already on its way
	}
}

func (s *sandboxSupervisor) isStopping() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopping
}

// killAll kills every process of the sandbox but the supervisor.
func (s *sandboxSupervisor) killAll() { _ = unix.Kill(-1, unix.SIGKILL) }

// finish records the main process's end in the bundle. The processes left
// in the sandbox die with the supervisor, PID 1 of their namespace.
func (s *sandboxSupervisor) finish(e Exit) {
	s.killAll()
	flushed := make(chan struct{})
	go func() { s.outputs.Wait(); close(flushed) }()
	select { // the last words of the main process, as long as they come
	case <-flushed:
	case <-time.After(time.Second):
	}
	data, _ := json.Marshal(e) // an int and a bool always marshal
	if err := s.writeBundleFile(ExitFile, data, true); err != nil {
		fmt.Fprintf(os.Stderr, "corral supervise: record the exit: %v\n", err)
	}
}

// writeBundleFile writes a file of the bundle atomically, through the
// bundle's descriptor (after the pivot it has no path), and synced to disk
// before it replaces the old one when durable.
func (s *sandboxSupervisor) writeBundleFile(name string, data []byte, durable bool) error {
	dir := int(s.bundle.Fd())
	fd, err := unix.Openat(dir, name+".tmp", unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return err
	}
	_, err = unix.Write(fd, data)
	if err == nil && durable {
		err = unix.Fsync(fd)
	}
	unix.Close(fd)
	if err != nil {
		return err
	}
	return unix.Renameat(dir, name+".tmp", dir, name)
}

// serve answers control requests until the supervisor exits.
func (s *sandboxSupervisor) serve(ln *net.UnixListener) {
	for {
		c, err := ln.AcceptUnix()
		if err != nil {
			return
		}
		go s.handle(c)
	}
}

func (s *sandboxSupervisor) handle(c *net.UnixConn) {
	defer c.Close()
	req, files, err := control.ReadRequest(c)
	if err != nil {
		return
	}
	if req.Op == control.OpExec {
		s.exec(c, req, files)
		return
	}
	control.CloseFiles(files)
	switch req.Op {
	case control.OpCheckpoint:
		s.checkpoint(c, req)
		return
	case control.OpResume:
		s.resume(c)
		return
	}
	switch req.Op {
	case control.OpStatus:
		state := control.StateRunning
		if s.isStopping() {
			state = control.StateStopping
		}
		_ = control.WriteReply(c, control.Reply{State: state, MainPID: s.main})
		return
	case control.OpStop:
		s.requestStop(req)
		_ = control.WriteReply(c, control.Reply{State: control.StateStopping})
	case control.OpWait:
	default:
		_ = control.WriteReply(c, control.Reply{Error: fmt.Sprintf("unknown request %q", req.Op)})
		return
	}
	_, _ = io.Copy(io.Discard, c) // held open until the supervisor exits
}

// exec runs a command in the sandbox with the caller's stdio, or on a
// terminal of the sandbox whose master goes to the caller; the command is
// killed if the caller goes away before it ends.
func (s *sandboxSupervisor) exec(c *net.UnixConn, req control.Request, files []*os.File) {
	s.mu.Lock()
	stopping, paused := s.stopping, s.paused != nil
	s.mu.Unlock()
	if stopping || paused {
		control.CloseFiles(files)
		why := "the sandbox is stopping"
		if !stopping {
			why = "the sandbox is paused, checkpointed out: its processes run again once resumed"
		}
		_ = control.WriteReply(c, control.Reply{Error: why})
		return
	}
	start := s.children.ExecStarter(s.cfg.Env)
	if g := s.gvisor; g != nil {
		start = func(req control.Request, stdio []*os.File) (int, <-chan int, func(), error) {
			return g.startExec(s, req, control.ExecEnv(s.cfg.Env, req), stdio)
		}
	}
	control.ServeExec(c, req, files, start)
}
