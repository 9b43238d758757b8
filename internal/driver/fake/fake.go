// Package fake is a compute driver without compute: it keeps its objects in
// a JSON file (so they survive a gateway restart) and obeys fault rules read
// from another file, so tests can hold, delay or fail any call, from this
// process or from outside it.
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
	"sync"
	"syscall"

	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/errdefs"
)

// Driver is the fake driver.
type Driver struct {
	cfg driver.Config
	mu  sync.Mutex // serializes this process's access to the objects file
	// cached is the objects file as this process last read or wrote it,
	// valid while cachedFile is the same file (every write makes a new one).
	cached     map[string]*object
	cachedFile os.FileInfo
	// encoded is each cached object's entry in the file ("id":{...}),
	// when this process wrote it: a save re-encodes only what changed.
	encoded map[string][]byte
}

var _ driver.Driver = (*Driver)(nil)

// New returns a fake driver keeping its files in cfg.StateDir.
func New(cfg driver.Config) (*Driver, error) {
	if cfg.Label == "" {
		return nil, errors.New("fake driver: no sandbox label configured")
	}
	if err := os.MkdirAll(filepath.Join(cfg.StateDir, "held"), 0o700); err != nil {
		return nil, fmt.Errorf("fake driver: %w", err)
	}
	return &Driver{cfg: cfg}, nil
}

// Name implements driver.Driver.
func (d *Driver) Name() string { return "fake" }

// Close implements driver.Driver.
func (d *Driver) Close() error { return nil }

// object is one fake compute object as kept in the file.
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
	return o.ID == p.ID && o.Generation == p.Generation && o.State == p.State && o.ExitCode == p.ExitCode &&
		o.Starts == p.Starts && o.Output == p.Output && maps.Equal(o.Labels, p.Labels) && slices.Equal(o.Command, p.Command)
}

func (o *object) public() driver.Object {
	return driver.Object{ID: o.ID, Generation: o.Generation, State: o.State, ExitCode: o.ExitCode, Labels: maps.Clone(o.Labels)}
}

// ObjectsFile is the name of the file that holds the objects in the state dir.
const ObjectsFile = "objects.json"

// load returns the objects, parsing the file only when it changed. The
// map is shared: callers only read it (update changes a copy).
func (d *Driver) load() (map[string]*object, error) {
	f, err := os.Open(filepath.Join(d.cfg.StateDir, ObjectsFile))
	if errors.Is(err, os.ErrNotExist) {
		return map[string]*object{}, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if d.cachedFile != nil && os.SameFile(fi, d.cachedFile) && fi.Size() == d.cachedFile.Size() && fi.ModTime().Equal(d.cachedFile.ModTime()) {
		return d.cached, nil
	}
	objs := map[string]*object{}
	if err := json.NewDecoder(f).Decode(&objs); err != nil {
		return nil, fmt.Errorf("fake driver: %s: %w", ObjectsFile, err)
	}
	d.cached, d.cachedFile, d.encoded = objs, fi, nil
	return objs, nil
}

// save writes objs, a changed copy of prev (the cached objects), as the
// objects file. Only the objects that changed are encoded again: with
// many objects, encoding them all made every call cost more than the rest
// of the gateway's work on it.
func (d *Driver) save(objs, prev map[string]*object) error {
	encoded := make(map[string][]byte, len(objs))
	data := []byte{'{'}
	for id, o := range objs {
		entry, ok := d.encoded[id]
		if !ok || prev[id] == nil || !o.equal(prev[id]) {
			key, err := json.Marshal(id)
			if err != nil {
				return err
			}
			value, err := json.Marshal(o)
			if err != nil {
				return err
			}
			entry = append(append(key, ':'), value...)
		}
		encoded[id] = entry
		if len(data) > 1 {
			data = append(data, ',')
		}
		data = append(data, entry...)
	}
	data = append(data, '}')
	path := filepath.Join(d.cfg.StateDir, ObjectsFile)
	if err := writeAtomic(path, data); err != nil {
		return err
	}
	d.cached, d.cachedFile, d.encoded = nil, nil, nil
	if fi, err := os.Stat(path); err == nil {
		d.cached, d.cachedFile, d.encoded = objs, fi, encoded
	}
	return nil
}

// cloneObjects copies objects, so that a copy may be changed while the
// original is read; labels are never changed in place.
func cloneObjects(objs map[string]*object) map[string]*object {
	out := make(map[string]*object, len(objs))
	for id, o := range objs {
		c := *o
		out[id] = &c
	}
	return out
}

func writeAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// update runs fn on the objects with the file locked (against this
// process and others, such as a test that makes a process exit), and saves
// them.
func (d *Driver) update(fn func(objs map[string]*object) error) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	lock, err := os.OpenFile(filepath.Join(d.cfg.StateDir, ObjectsFile+".lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return err
	}
	loaded, err := d.load()
	if err != nil {
		return err
	}
	objs := cloneObjects(loaded)
	if err := fn(objs); err != nil {
		return err
	}
	return d.save(objs, loaded)
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
	if err := fn(); err != nil {
		return err
	}
	return d.inject(ctx, op, id, name, true)
}

// Create implements driver.Driver.
func (d *Driver) Create(ctx context.Context, spec driver.Spec) error {
	return d.call(ctx, "create", spec.ID, spec.Name, func() error {
		return d.update(func(objs map[string]*object) error {
			if o := objs[spec.ID]; d.mine(o) {
				switch {
				case o.Generation == spec.Generation:
					return nil // adopt
				case o.State == driver.StateRunning:
					return errdefs.FailedPrecondition("fake object for sandbox %s runs generation %d", spec.ID, o.Generation)
				}
			}
			labels := driver.ObjectLabels(spec, d.cfg.Label)
			starts := 0
			if o := objs[spec.ID]; o != nil {
				starts = o.Starts
			}
			objs[spec.ID] = &object{ID: spec.ID, Generation: spec.Generation, State: driver.StateCreated, Labels: labels, Starts: starts,
				Command: slices.Clone(spec.Command)}
			return nil
		})
	})
}

// Start implements driver.Driver.
func (d *Driver) Start(ctx context.Context, ref driver.Ref) error {
	return d.call(ctx, "start", ref.ID, "", func() error {
		return d.update(func(objs map[string]*object) error {
			o := objs[ref.ID]
			if !d.mine(o) {
				return errdefs.NotFound("fake object for sandbox %s not found", ref.ID)
			}
			if o.Generation != ref.Generation {
				return errdefs.FailedPrecondition("fake object for sandbox %s is generation %d, not %d", ref.ID, o.Generation, ref.Generation)
			}
			if o.State == driver.StateRunning {
				return nil
			}
			o.State, o.ExitCode = driver.StateRunning, 0
			o.Starts++
			if len(o.Command) > 0 {
				out, _ := run(o.Command, nil) // the main process "prints" at once, then runs on
				o.Output += out
			}
			return nil
		})
	})
}

// Stop implements driver.Driver.
func (d *Driver) Stop(ctx context.Context, ref driver.Ref, _ driver.StopOptions) error {
	return d.call(ctx, "stop", ref.ID, "", func() error {
		return d.update(func(objs map[string]*object) error {
			if o := objs[ref.ID]; d.mine(o) && o.State == driver.StateRunning {
				o.State, o.ExitCode = driver.StateStopped, 137 // as if killed
			}
			return nil
		})
	})
}

// Delete implements driver.Driver.
func (d *Driver) Delete(ctx context.Context, id string) error {
	return d.call(ctx, "delete", id, "", func() error {
		return d.update(func(objs map[string]*object) error {
			if d.mine(objs[id]) {
				delete(objs, id)
			}
			return nil
		})
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
		d.mu.Lock()
		defer d.mu.Unlock()
		objs, err := d.load()
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

// Seed adds running objects for sandboxes, all in one write, as if they
// had been created and started (benchmarks start from many of them).
func Seed(stateDir, label string, specs []driver.Spec) error {
	d := &Driver{cfg: driver.Config{Label: label, StateDir: stateDir}}
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return err
	}
	return d.update(func(objs map[string]*object) error {
		for _, spec := range specs {
			objs[spec.ID] = &object{ID: spec.ID, Generation: spec.Generation, State: driver.StateRunning,
				Labels: driver.ObjectLabels(spec, label), Starts: 1}
		}
		return nil
	})
}

// Exit makes the main process of a running fake object exit with code,
// as a real one would on its own.
func Exit(stateDir, id string, code int) error {
	d := &Driver{cfg: driver.Config{StateDir: stateDir}}
	return d.update(func(objs map[string]*object) error {
		o := objs[id]
		if o == nil || o.State != driver.StateRunning {
			return errdefs.FailedPrecondition("fake object for sandbox %s is not running", id)
		}
		o.State, o.ExitCode = driver.StateStopped, code
		return nil
	})
}

// Starts returns how many times the object of a sandbox id was started
// (0 when there is none); tests use it to prove run-once behaviour.
func Starts(stateDir, id string) (int, error) {
	d := &Driver{cfg: driver.Config{StateDir: stateDir}}
	objs, err := d.load()
	if err != nil {
		return 0, err
	}
	if o := objs[id]; o != nil {
		return o.Starts, nil
	}
	return 0, nil
}
