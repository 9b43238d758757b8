package shim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/control"
	"github.com/corral-sandbox/corral/internal/driver"
)

// Memory checkpoints of the gVisor tier. runsc checkpoints only a sandbox
// on gVisor's own network stack (it refuses hostinet), so a checkpointable
// sandbox runs with --network=none: loopback inside gVisor, nothing else.
// runsc 20221219's checkpoint ends the container (--leave-running does not
// work there), so a checkpoint of a sandbox that goes on is a checkpoint,
// a hold while the gateway copies /sandbox (nothing runs, so files and
// memory are of one instant), and a restore in place from the image.

// RestoreDir is the bundle's directory of a memory image
// (driver.MemoryImage in it) that the incarnation's start restores instead
// of running the command.
const RestoreDir = "restore"

// checkpointDir is GVisorDir's directory of a checkpoint's image, from the
// checkpoint to the restore in place.
const checkpointDir = "checkpoint"

// The bounds of a checkpoint's steps.
const (
	// runscWait bounds one runsc checkpoint, delete, state or restore.
	runscWait = 2 * time.Minute
	// holdWait bounds how long the processes stay stopped for the copy
	// when the caller neither lets them go on nor goes away.
	holdWait = time.Hour
)

// mainProc is the main process, as a restore replaces it.
type mainProc struct {
	pid  int
	done <-chan int
}

// endedMain is a main process that has ended with code.
func endedMain(code int) *mainProc {
	done := make(chan int, 1)
	done <- code
	return &mainProc{done: done}
}

// output runs a runsc subcommand on the container and returns what it
// printed (both streams) and its exit code, reaping as it waits (the run
// loop may not be reaping yet).
func (g *gvisor) output(s *sandboxSupervisor, sub ...string) (string, int, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return "", 0, err
	}
	null, err := os.Open(os.DevNull)
	if err != nil {
		r.Close()
		w.Close()
		return "", 0, err
	}
	_, done, _, failed, err := s.children.Start(g.command(sub...), hostEnv, []*os.File{null, w, w}, false)
	null.Close()
	w.Close()
	if err == nil && failed != nil {
		err = failed
	}
	if err != nil {
		r.Close()
		return "", 0, fmt.Errorf("runsc %s: %w", sub[0], err)
	}
	var out bytes.Buffer
	copied := make(chan struct{})
	go func() { _, _ = io.Copy(&out, io.LimitReader(r, 64<<10)); r.Close(); close(copied) }()
	for deadline := time.Now().Add(runscWait); ; time.Sleep(5 * time.Millisecond) {
		s.children.Reap()
		select {
		case code := <-done:
			<-copied
			return strings.TrimSpace(out.String()), code, nil
		default:
		}
		if time.Now().After(deadline) {
			return "", 0, fmt.Errorf("runsc %s did not end within %v", sub[0], runscWait)
		}
	}
}

// restore starts the container from the memory image in dir, in place of
// its init, and waits until it runs.
func (g *gvisor) restore(s *sandboxSupervisor, dir string, stdio []*os.File) (mainProc, error) {
	pid, done, _, failed, err := s.children.Start(g.command("restore", "--image-path", dir, "--bundle", filepath.Join(g.dir, "oci"), g.id), hostEnv, stdio, false)
	if err == nil && failed != nil {
		err = failed
	}
	if err != nil {
		return mainProc{}, fmt.Errorf("runsc restore: %w", err)
	}
	for deadline := time.Now().Add(runscWait); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		s.children.Reap()
		select {
		case code := <-done:
			return mainProc{}, fmt.Errorf("runsc restore exited with %d%s", code, LastLine(filepath.Join(g.dir, runscLog)))
		default:
		}
		out, code, err := g.output(s, "state", g.id)
		var state struct{ Status string }
		if err == nil && code == 0 && json.Unmarshal([]byte(out), &state) == nil && state.Status == "running" {
			return mainProc{pid: pid, done: done}, nil
		}
	}
	return mainProc{}, fmt.Errorf("the restored container did not run within %v", runscWait)
}

// restoreImage is the memory image the incarnation starts from, when its
// bundle has one.
func (g *gvisor) restoreImage(bundle string) (string, bool) {
	dir := filepath.Join(bundle, RestoreDir)
	_, err := os.Stat(filepath.Join(dir, driver.MemoryImage))
	return dir, err == nil
}

// restoredProtection is added to the protections of a sandbox started
// from a memory image: its processes are the checkpoint's, with what was
// applied to them then.
const restoredProtection = "restored from a memory checkpoint: its processes are the checkpointed ones, with what was applied to them"

// checkpoint serves OpCheckpoint: the memory image into the bundle's
// checkpointDir (the supervisor's own: a gateway that dies cannot take it
// from under the restore), the processes held stopped until the caller
// writes a line or goes away (with req.Pause: until OpResume), or a stop
// comes, then restored in place.
func (s *sandboxSupervisor) checkpoint(c *net.UnixConn, req control.Request) {
	g := s.gvisor
	fail := func(format string, args ...any) {
		_ = control.WriteReply(c, control.Reply{Error: fmt.Sprintf(format, args...)})
	}
	switch {
	case g == nil:
		fail("the sandbox runs on the host's kernel: only the gVisor tier checkpoints memory (CRIU cannot run on this host, and cannot restore a Landlock domain)")
		return
	case !s.cfg.Checkpointable:
		fail("the sandbox runs on the host's network stack, which runsc cannot checkpoint: its policy needs lifecycle.memory_snapshots: true")
		return
	}
	dir := filepath.Join(g.dir, checkpointDir)
	s.mu.Lock()
	busy, stopping, paused := s.checkpointing, s.stopping, s.paused != nil
	if !busy && !stopping {
		s.checkpointing = true
	}
	s.mu.Unlock()
	switch {
	case paused && req.Pause:
		_ = control.WriteReply(c, control.Reply{State: control.StateCheckpointed, Path: dir})
		return
	case busy:
		fail("the sandbox is being checkpointed")
		return
	case stopping:
		fail("the sandbox is stopping")
		return
	}
	err := os.RemoveAll(dir)
	if err == nil {
		err = os.Mkdir(dir, 0o700)
	}
	out, code := "", 0
	if err == nil {
		out, code, err = g.output(s, "checkpoint", "--image-path", dir, g.id)
	}
	if err == nil && code != 0 {
		err = fmt.Errorf("runsc checkpoint exited with %d: %s", code, out)
	}
	if err != nil {
		s.endCheckpoint(nil)
		fail("checkpoint: %v", err)
		return
	}
	select { // the container's end ends its `runsc run`, which the run loop hands here
	case <-s.mainEnded:
	case <-time.After(runscWait):
	}
	var (
		hold    <-chan struct{}
		timeout <-chan time.Time
		p       *memoryPause
	)
	if req.Pause {
		// Marked before the reply: the caller observes it paused from then.
		p = &memoryPause{resume: make(chan struct{}), done: make(chan struct{})}
		s.mu.Lock()
		s.paused = p
		s.mu.Unlock()
		if err := s.writeBundleFile(PausedFile, nil, false); err != nil {
			fmt.Fprintf(os.Stderr, "corral supervise: mark the pause: %v\n", err)
		}
		hold = p.resume
	} else {
		held := make(chan struct{})
		go func() { _, _ = c.Read(make([]byte, 1)); close(held) }()
		hold, timeout = held, time.After(holdWait)
	}
	if err := control.WriteReply(c, control.Reply{State: control.StateCheckpointed, Path: dir}); err != nil && p == nil {
		fmt.Fprintf(os.Stderr, "corral supervise: checkpoint: the caller went away (%v); restoring\n", err)
	}
	select {
	case <-hold:
	case <-s.stopNow:
	case <-timeout:
	}
	err = s.restoreInPlace(dir)
	if p != nil {
		s.endPause(p, err)
		return
	}
	if err != nil {
		fail("%v", err)
		return
	}
	_ = control.WriteReply(c, control.Reply{State: control.StateRunning})
}

// restoreInPlace ends a checkpoint's hold: the processes are restored
// from the image in dir, unless a stop came, which ends them.
func (s *sandboxSupervisor) restoreInPlace(dir string) error {
	g := s.gvisor
	if s.isStopping() {
		s.endCheckpoint(endedMain(0))
		return errors.New("the sandbox was stopped while checkpointed")
	}
	_, _, _ = g.output(s, "delete", "--force", g.id) // the checkpointed container's state
	null, err := os.Open(os.DevNull)
	var m mainProc
	if err == nil {
		var stdout, stderr *os.File
		if stdout, err = s.output(StdoutFile); err == nil {
			if stderr, err = s.output(StderrFile); err == nil {
				m, err = g.restore(s, dir, []*os.File{null, stdout, stderr})
				stderr.Close()
			}
			stdout.Close()
		}
		null.Close()
	}
	if err != nil {
		// The processes are gone: the incarnation ends, recorded failed.
		fmt.Fprintf(os.Stderr, "corral supervise: restore in place after a checkpoint: %v\n", err)
		s.endCheckpoint(endedMain(1))
		return fmt.Errorf("restore after the checkpoint: %w", err)
	}
	s.endCheckpoint(&m)
	_ = os.RemoveAll(dir)
	return nil
}

// memoryPause is a pause's hold of the checkpointed-out processes: resume
// is closed (once) to restore them; done is closed when the hold has
// ended, err saying how.
type memoryPause struct {
	resume chan struct{}
	once   sync.Once
	done   chan struct{}
	err    error
}

// endPause ends a pause's hold with err (nil: the processes run again).
func (s *sandboxSupervisor) endPause(p *memoryPause, err error) {
	s.mu.Lock()
	s.paused = nil
	s.mu.Unlock()
	_ = unix.Unlinkat(int(s.bundle.Fd()), PausedFile, 0)
	p.err = err
	close(p.done)
}

// resume serves OpResume: the processes a pause holds are restored.
func (s *sandboxSupervisor) resume(c *net.UnixConn) {
	s.mu.Lock()
	p := s.paused
	s.mu.Unlock()
	if p != nil {
		p.once.Do(func() { close(p.resume) })
		<-p.done
		if p.err != nil {
			_ = control.WriteReply(c, control.Reply{Error: p.err.Error()})
			return
		}
	}
	_ = control.WriteReply(c, control.Reply{State: control.StateRunning})
}

// endCheckpoint ends a checkpoint: the run loop waits on m (a restored
// main process, or one that has ended) from now on, or, with m nil (the
// checkpoint failed), on the main process it had, unless that ended
// meanwhile.
func (s *sandboxSupervisor) endCheckpoint(m *mainProc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.checkpointing = false
	if m == nil {
		select {
		case code := <-s.mainEnded:
			m = endedMain(code)
		default:
			return
		}
	}
	s.mains <- *m
}

// handOver is the run loop's view of the main process's end: during a
// checkpoint it is the checkpoint's, handed to it, and not the
// incarnation's.
func (s *sandboxSupervisor) handOver(code int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.checkpointing {
		return false
	}
	select {
	case s.mainEnded <- code:
	default:
	}
	return true
}

// errNotCheckpointable is the refusal of a restore on a sandbox that is
// not on gVisor's own network stack.
var errNotCheckpointable = errors.New("a memory image restores only on the gVisor tier with lifecycle.memory_snapshots: true (gVisor's own network stack)")
