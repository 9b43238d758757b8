// Package fake is a compute driver without compute: it keeps each object in
// a JSON file of its own (so they survive a gateway restart), so that the
// API runs without Docker or root. Tests give it fault injection (Faults,
// package faults) to hold, delay or fail any call.
package fake

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/errdefs"
)

// Driver is the fake driver.
type Driver struct {
	cfg driver.Config
	mu  sync.Mutex // serializes this process's changes to the objects
	// lock and changes are the lock file and the changes file, kept open
	// by a driver that New made until Close (the helpers below, and a
	// closed driver, open them per change). Set once.
	lock, changes *os.File
	closed        atomic.Bool

	// cache holds objects as this driver last read or wrote them. It is
	// good for what the first seen bytes of the changes file account for:
	// a newer line there drops its object from the cache. (Only a driver
	// that New made has one, and only until Close.)
	caching   bool
	cacheMu   sync.Mutex
	cache     map[string]*object
	seen, end int64 // end: the file's size when it was last looked at

	free []string // files of the free dir believed there (d.mu)

	faults Faults // nil: none

	calls inFlight
}

// Options tune a fake driver.
type Options struct {
	// Faults, when set, injects faults into every call (tests only).
	Faults Faults
}

var _ driver.Driver = (*Driver)(nil)

// New returns a fake driver keeping its files in cfg.StateDir.
func New(cfg driver.Config, opts Options) (*Driver, error) {
	if cfg.Label == "" {
		return nil, errors.New("fake driver: no sandbox label configured")
	}
	for _, dir := range []string{ObjectsDir, freeDir} {
		if err := os.MkdirAll(filepath.Join(cfg.StateDir, dir), 0o700); err != nil {
			return nil, fmt.Errorf("fake driver: %w", err)
		}
	}
	d := &Driver{cfg: cfg, caching: true, cache: map[string]*object{}, faults: opts.Faults}
	if err := d.keepFree(); err != nil {
		return nil, fmt.Errorf("fake driver: %w", err)
	}
	var err error
	if d.lock, d.changes, err = openShared(cfg.StateDir); err != nil {
		return nil, fmt.Errorf("fake driver: %w", err)
	}
	return d, nil
}

// openShared opens the lock file and the changes file of a state dir.
func openShared(stateDir string) (lock, changes *os.File, err error) {
	lock, err = os.OpenFile(filepath.Join(stateDir, lockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, nil, err
	}
	changes, err = os.OpenFile(filepath.Join(stateDir, ChangesFile), os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		lock.Close()
		return nil, nil, err
	}
	return lock, changes, nil
}

// Name implements driver.Driver.
func (d *Driver) Name() string { return "fake" }

// Close implements driver.Driver.
func (d *Driver) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.lock == nil || d.closed.Swap(true) {
		return nil
	}
	d.cacheMu.Lock()
	defer d.cacheMu.Unlock()
	return errors.Join(d.lock.Close(), d.changes.Close())
}

// object is one fake compute object as kept in its file.
type object struct {
	ID         string            `json:"id"`
	Generation int64             `json:"generation"`
	State      driver.State      `json:"state"`
	ExitCode   int               `json:"exit_code"`
	Labels     map[string]string `json:"labels"`
	Starts     int               `json:"starts"`
	// Command is the main command; Output what it "printed" (see exec.go).
	Command []string `json:"command,omitempty"`
	Output  string   `json:"output,omitempty"`
}

// equal reports whether two objects would be written the same.
func (o *object) equal(p *object) bool {
	if o == nil || p == nil {
		return o == p
	}
	return o.ID == p.ID && o.Generation == p.Generation && o.State == p.State && o.ExitCode == p.ExitCode &&
		o.Starts == p.Starts && o.Output == p.Output && maps.Equal(o.Labels, p.Labels) && slices.Equal(o.Command, p.Command)
}

func (o *object) public() driver.Object {
	return driver.Object{ID: o.ID, Generation: o.Generation, State: o.State, ExitCode: o.ExitCode, Labels: maps.Clone(o.Labels)}
}

const (
	// ObjectsDir is the directory of the state dir that holds one file per
	// object, ID.json, replaced whole on every change. (One file of all the
	// objects made every call cost as much as writing them all.)
	ObjectsDir = "objects"
	// ChangesFile is the file of the state dir that every change appends
	// the object's id to, one a line, for Watch.
	ChangesFile = "changes"
	lockFile    = "objects.lock"
)

func (d *Driver) objectPath(id string) string {
	return filepath.Join(d.cfg.StateDir, ObjectsDir, id+".json")
}

// read returns the object of id, nil when there is none. Callers do not
// change it (change works on a copy). A file is read only with the objects
// locked: files are rewritten in place (see replace).
func (d *Driver) read(id string) (*object, error) {
	if o, ok, err := d.fromCache(id); ok || err != nil {
		return o, err
	}
	var o *object
	err := d.locked(func(*os.File) error {
		var err error
		o, err = d.load(id)
		return err
	})
	return o, err
}

// fromCache returns the object of id when the cache holds it.
func (d *Driver) fromCache(id string) (*object, bool, error) {
	if !d.caching {
		return nil, false, nil
	}
	d.cacheMu.Lock()
	defer d.cacheMu.Unlock()
	if d.closed.Load() {
		return nil, false, nil
	}
	if err := d.catchUp(); err != nil {
		return nil, false, err
	}
	o, ok := d.cache[id]
	return o, ok, nil
}

// load is read with the objects locked.
func (d *Driver) load(id string) (*object, error) {
	if !d.caching {
		return d.readFile(id)
	}
	d.cacheMu.Lock()
	defer d.cacheMu.Unlock()
	if d.closed.Load() {
		return d.readFile(id)
	}
	if err := d.catchUp(); err != nil {
		return nil, err
	}
	if o, ok := d.cache[id]; ok {
		return o, nil
	}
	o, err := d.readFile(id)
	if o != nil {
		d.cache[id] = o
	}
	return o, err
}

// catchUp drops from the cache the objects that the changes file names
// after what it has seen. d.cacheMu is held.
func (d *Driver) catchUp() error {
	fi, err := d.changes.Stat()
	if err != nil {
		return fmt.Errorf("fake driver: %w", err)
	}
	size := fi.Size()
	switch d.end = size; {
	case size < d.seen: // not the file it was
		d.cache, d.seen = map[string]*object{}, 0
	case size == d.seen:
		return nil
	}
	ids, next, err := readChanges(d.changes, d.seen)
	if err != nil {
		return fmt.Errorf("fake driver: %w", err)
	}
	for _, id := range ids {
		delete(d.cache, id)
	}
	d.seen = next
	return nil
}

// record appends id to the changes file and caches next (nil when removed)
// as its object, the line as seen when nothing unseen precedes it. The
// objects are locked, so no one else wrote to the changes file since change
// loaded the object; d.cacheMu is held across the append so that no
// catchUp reads the line as another's.
func (d *Driver) record(changes *os.File, id string, next *object) error {
	if d.caching {
		d.cacheMu.Lock()
		defer d.cacheMu.Unlock()
	}
	line := id + "\n"
	if _, err := changes.WriteString(line); err != nil {
		return err
	}
	if !d.caching {
		return nil
	}
	if next == nil {
		delete(d.cache, id)
	} else {
		d.cache[id] = next
	}
	if d.seen == d.end {
		d.seen += int64(len(line))
	}
	d.end += int64(len(line))
	return nil
}

// readFile reads the object of id from its file.
func (d *Driver) readFile(id string) (*object, error) {
	data, err := os.ReadFile(d.objectPath(id))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("fake driver: %w", err)
	}
	o := &object{}
	if err := json.Unmarshal(data, o); err != nil {
		return nil, fmt.Errorf("fake driver: %s/%s.json: %w", ObjectsDir, id, err)
	}
	return o, nil
}

// readAll returns every object, by id.
func (d *Driver) readAll() (map[string]*object, error) {
	var objs map[string]*object
	err := d.locked(func(*os.File) error {
		entries, err := os.ReadDir(filepath.Join(d.cfg.StateDir, ObjectsDir))
		if err != nil {
			return fmt.Errorf("fake driver: %w", err)
		}
		objs = make(map[string]*object, len(entries))
		for _, e := range entries {
			id, ok := strings.CutSuffix(e.Name(), ".json")
			if !ok {
				continue // a temporary file of an older version
			}
			o, err := d.load(id)
			if err != nil {
				return err
			}
			if o != nil {
				objs[id] = o
			}
		}
		return nil
	})
	return objs, err
}

// update runs fn on a copy of the object of id (nil when there is none)
// with the objects locked (against this process and others, such as a test
// that makes a process exit), and writes what fn returns when it differs
// (nil removes the object).
func (d *Driver) update(id string, fn func(o *object) (*object, error)) error {
	return d.locked(func(changes *os.File) error { return d.change(changes, id, fn) })
}

// locked runs fn with the objects locked against this process and others,
// giving it the changes file to append to.
func (d *Driver) locked(fn func(changes *os.File) error) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	lock, changes := d.lock, d.changes
	if lock == nil || d.closed.Load() { // a helper's driver, or a closed one
		for _, dir := range []string{ObjectsDir, freeDir} {
			if err := os.MkdirAll(filepath.Join(d.cfg.StateDir, dir), 0o700); err != nil {
				return err
			}
		}
		var err error
		if lock, changes, err = openShared(d.cfg.StateDir); err != nil {
			return err
		}
		defer lock.Close()
		defer changes.Close()
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return err
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	return fn(changes)
}

// change is update with the objects already locked.
func (d *Driver) change(changes *os.File, id string, fn func(o *object) (*object, error)) error {
	cur, err := d.load(id)
	if err != nil {
		return err
	}
	var edit *object
	if cur != nil {
		c := *cur
		edit = &c
	}
	next, err := fn(edit)
	if err != nil || next.equal(cur) {
		return err
	}
	if next == nil {
		err = d.remove(id)
	} else {
		var data []byte
		if data, err = json.Marshal(next); err == nil {
			err = d.replace(id, data)
		}
	}
	if err != nil {
		return err
	}
	return d.record(changes, id, next)
}

// mine reports whether an object carries this gateway's label.
func (d *Driver) mine(o *object) bool { return o != nil && o.Labels[d.cfg.Label] == "true" }

// call runs one driver call between the fault rules that apply to it.
func (d *Driver) call(ctx context.Context, op, id, name string, fn func() error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := d.inject(ctx, op, id, name, false); err != nil {
		return err
	}
	if id != "" {
		defer d.calls.begin(d.cfg, id, op)()
	}
	if err := fn(); err != nil {
		return err
	}
	return d.inject(ctx, op, id, name, true)
}

// Create implements driver.Driver.
func (d *Driver) Create(ctx context.Context, spec driver.Spec) error {
	return d.call(ctx, "create", spec.ID, spec.Name, func() error {
		return d.update(spec.ID, func(o *object) (*object, error) {
			if d.mine(o) {
				switch {
				case o.Generation == spec.Generation:
					return o, nil // adopt
				case o.State == driver.StateRunning || o.State == driver.StatePaused:
					return nil, errdefs.FailedPrecondition("fake object for sandbox %s runs generation %d", spec.ID, o.Generation)
				}
			}
			starts := 0
			if o != nil {
				starts = o.Starts
			}
			return &object{ID: spec.ID, Generation: spec.Generation, State: driver.StateCreated,
				Labels: d.cfg.ObjectLabels(spec), Starts: starts, Command: slices.Clone(spec.Command)}, nil
		})
	})
}

// Start implements driver.Driver.
func (d *Driver) Start(ctx context.Context, ref driver.Ref) error {
	return d.call(ctx, "start", ref.ID, "", func() error {
		return d.update(ref.ID, func(o *object) (*object, error) {
			if !d.mine(o) {
				return nil, errdefs.NotFound("fake object for sandbox %s not found", ref.ID)
			}
			if o.Generation != ref.Generation {
				return nil, errdefs.FailedPrecondition("fake object for sandbox %s is generation %d, not %d", ref.ID, o.Generation, ref.Generation)
			}
			if o.State == driver.StateRunning || o.State == driver.StatePaused {
				return o, nil
			}
			o.State, o.ExitCode = driver.StateRunning, 0
			o.Starts++
			if len(o.Command) > 0 {
				out, _ := run(o.Command, nil, d.workdir(ref.ID)) // the main process "prints" at once, then runs on
				o.Output += out
			}
			return o, nil
		})
	})
}

// Stop implements driver.Driver.
func (d *Driver) Stop(ctx context.Context, ref driver.Ref, _ driver.StopOptions) error {
	return d.call(ctx, "stop", ref.ID, "", func() error {
		return d.update(ref.ID, func(o *object) (*object, error) {
			if d.mine(o) && (o.State == driver.StateRunning || o.State == driver.StatePaused) {
				o.State, o.ExitCode = driver.StateStopped, 137 // as if killed
			}
			return o, nil
		})
	})
}

// Pause implements driver.Pauser.
func (d *Driver) Pause(ctx context.Context, ref driver.Ref) error {
	return d.freeze(ctx, "pause", ref, driver.StateRunning, driver.StatePaused)
}

// PauseMemory implements driver.MemoryPauser: the fake keeps no memory,
// so it is a pause recorded as a call of its own.
func (d *Driver) PauseMemory(ctx context.Context, ref driver.Ref) error {
	return d.freeze(ctx, "pause-memory", ref, driver.StateRunning, driver.StatePaused)
}

// Resume implements driver.Pauser.
func (d *Driver) Resume(ctx context.Context, ref driver.Ref) error {
	return d.freeze(ctx, "resume", ref, driver.StatePaused, driver.StateRunning)
}

// freeze moves the incarnation ref from state from to state to; one
// already there stays.
func (d *Driver) freeze(ctx context.Context, op string, ref driver.Ref, from, to driver.State) error {
	return d.call(ctx, op, ref.ID, "", func() error {
		return d.update(ref.ID, func(o *object) (*object, error) {
			if !d.mine(o) || o.Generation != ref.Generation || (o.State != from && o.State != to) {
				return nil, errdefs.NotFound("fake sandbox %s generation %d does not run", ref.ID, ref.Generation)
			}
			o.State = to
			return o, nil
		})
	})
}

// Delete implements driver.Driver.
func (d *Driver) Delete(ctx context.Context, id string) error {
	return d.call(ctx, "delete", id, "", func() error {
		mine := false
		err := d.update(id, func(o *object) (*object, error) {
			if mine = d.mine(o); mine {
				return nil, nil
			}
			return o, nil
		})
		if err != nil || !mine {
			return err
		}
		return d.removeWorkdir(id)
	})
}

// Inspect implements driver.Driver.
func (d *Driver) Inspect(ctx context.Context, id string) (driver.Object, error) {
	var got driver.Object
	err := d.call(ctx, "inspect", id, "", func() error {
		o, err := d.object(id)
		got = o.public()
		return err
	})
	return got, err
}

// List implements driver.Driver.
func (d *Driver) List(ctx context.Context) ([]driver.Object, error) {
	var list []driver.Object
	err := d.call(ctx, "list", "", "", func() error {
		objs, err := d.readAll()
		if err != nil {
			return err
		}
		for _, id := range slices.Sorted(maps.Keys(objs)) {
			if o := objs[id]; d.mine(o) {
				list = append(list, o.public())
			}
		}
		return nil
	})
	return list, err
}

// Seed adds running objects for sandboxes, as if they had been created and
// started (benchmarks start from many of them).
func Seed(stateDir, label string, specs []driver.Spec) error {
	d := &Driver{cfg: driver.Config{Label: label, StateDir: stateDir}}
	return d.locked(func(changes *os.File) error {
		for _, spec := range specs {
			err := d.change(changes, spec.ID, func(*object) (*object, error) {
				return &object{ID: spec.ID, Generation: spec.Generation, State: driver.StateRunning,
					Labels: d.cfg.ObjectLabels(spec), Starts: 1}, nil
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
}

// Exit makes the main process of a running fake object exit with code,
// as a real one would on its own.
func Exit(stateDir, id string, code int) error {
	d := &Driver{cfg: driver.Config{StateDir: stateDir}}
	return d.update(id, func(o *object) (*object, error) {
		if o == nil || o.State != driver.StateRunning {
			return nil, errdefs.FailedPrecondition("fake object for sandbox %s is not running", id)
		}
		o.State, o.ExitCode = driver.StateStopped, code
		return o, nil
	})
}

// Starts returns how many times the object of a sandbox id was started
// (0 when there is none); tests use it to prove run-once behaviour.
func Starts(stateDir, id string) (int, error) {
	d := &Driver{cfg: driver.Config{StateDir: stateDir}}
	o, err := d.read(id)
	if err != nil || o == nil {
		return 0, err
	}
	return o.Starts, nil
}
