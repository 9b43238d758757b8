package fake

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/corral-sandbox/corral/internal/driver"
)

// callsDir is the directory of the state dir where each sandbox's calls
// in flight are marked, and overlapsFile the file where calls for one
// sandbox by two processes at once are written down.
const (
	callsDir     = "calls"
	overlapsFile = "overlaps"
)

// inFlight marks this driver's calls in flight, per sandbox, by an
// exclusive flock on the sandbox's file of callsDir, held from the first
// call's start to the last one's end: a driver of another process that
// calls for the sandbox meanwhile finds it held and writes the overlap
// down. The kernel lets go of a killed process's locks, so a gateway
// killed mid-call overlaps with nobody after it. Two replicas never drive
// one sandbox at once: Overlaps is how the tests check it.
type inFlight struct {
	mu    sync.Mutex
	files map[string]*heldCalls
}

type heldCalls struct {
	f *os.File
	n int
}

// begin marks a call of op for id, and returns its end.
func (c *inFlight) begin(cfg driver.Config, id, op string) (end func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if h := c.files[id]; h != nil {
		h.n++
		return func() { c.end(id) }
	}
	dir := filepath.Join(cfg.StateDir, callsDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return func() {}
	}
	f, err := os.OpenFile(filepath.Join(dir, id), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return func() {}
	}
	me := fmt.Sprintf("pid %d epoch %d %s", os.Getpid(), cfg.Epoch, op)
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(f.Name())
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			note(dir, fmt.Sprintf("sandbox %s: %s while %s\n", id, me, bytes.TrimSpace(holder)))
		}
		return func() {}
	}
	_, _ = f.WriteAt([]byte(me+"\n"), 0) // then cut what a longer holder's left
	_ = f.Truncate(int64(len(me) + 1))
	if c.files == nil {
		c.files = map[string]*heldCalls{}
	}
	c.files[id] = &heldCalls{f: f, n: 1}
	return func() { c.end(id) }
}

func (c *inFlight) end(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	h := c.files[id]
	if h.n--; h.n > 0 {
		return
	}
	delete(c.files, id)
	_ = syscall.Flock(int(h.f.Fd()), syscall.LOCK_UN)
	h.f.Close()
}

// note appends an overlap to the overlaps file.
func note(dir, line string) {
	f, err := os.OpenFile(filepath.Join(dir, overlapsFile), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return
	}
	defer f.Close()
	_, _ = f.WriteString(line)
}

// Overlaps are the calls for one sandbox that fake drivers of two
// processes made at once on stateDir, a line each ("sandbox ID: pid P
// epoch E OP while pid P' epoch E' OP'").
func Overlaps(stateDir string) ([]string, error) {
	b, err := os.ReadFile(filepath.Join(stateDir, callsDir, overlapsFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n"), nil
}
