// Package native is the compute driver that needs no daemon: every sandbox
// incarnation is a detached supervisor process (`corral supervise sandbox`)
// in its own session and in new mount, PID, UTS, IPC and network
// namespaces (and a user namespace when the gateway is not root), with
// memory, CPU and PID limits through cgroups.
//
// Its state lives in files under the driver's state directory:
//
//	sandboxes/ID/object.json   the object: id, generation, labels, spec
//	sandboxes/ID/workdir/      mounted read-write at /sandbox
//	sandboxes/ID/gen-N/        the bundle of incarnation N (shim.Bundle)
//	run/ID-N.sock              the control socket of incarnation N
//	trash/ID                   a deleted sandbox's files, on their way out
//	ids/BASE                   the host id range from BASE reserved, by the sandbox named inside (ids.go)
//
// A supervisor holds its bundle's lock while it lives, so the driver tells
// a live incarnation from a gone one without trusting a pid; a new
// generation has a new bundle and a new socket, so nothing meant for an
// incarnation that is still shutting down can reach the next one.
package native

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/corral-sandbox/corral/internal/atomicfile"
	"github.com/corral-sandbox/corral/internal/cgroups"
	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/driver/native/shim"
	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/netns"
	"github.com/corral-sandbox/corral/internal/policy"
	"github.com/corral-sandbox/corral/internal/supervisor"
)

// Options configure the native driver.
type Options struct {
	// Supervisor is the corral binary that supervisors run.
	Supervisor string
	// Hide are host directories sandboxes on the host's root must not see
	// (the gateway's home: its store and keys).
	Hide []string
	// Images is the cache OCI images come from; nil: the driver runs only
	// the host's operating system and root directories.
	Images Images
	// Env is added to every sandbox's environment (tests give a test
	// build of the supervisor a simulated kernel this way:
	// testbug.LandlockABIEnv).
	Env []string
	// ImageCacheBytes bounds what Images keeps: past it, after a pull, the
	// images no sandbox uses go, least recently pulled first (0:
	// DefaultImageCacheBytes).
	ImageCacheBytes int64
	// Runsc is gVisor's runsc, which runs the sandboxes of the gVisor
	// tier (policy isolation: gvisor): a path, or a name looked up in
	// PATH ("": "runsc").
	Runsc string
}

// Driver is the native driver.
type Driver struct {
	netns.Reach // ports and egress, inside each supervisor's network namespace
	cfg         driver.Config
	opts        Options

	mu       sync.Mutex
	locks    map[string]*sync.Mutex // one per sandbox id: calls on one id are serialized
	busy     int                    // calls holding one of locks
	lastBusy time.Time              // when the last of them ended

	idsMu sync.Mutex // held while a sandbox's host id range is chosen and saved
	// idsIndexed: the ranges of the sandboxes there were at the first
	// choice are reserved; nextRange: the range tried first next (idsMu).
	idsIndexed bool
	nextRange  uint32
	// imagesMu is read-held by a create from its image's pull until its
	// object records the image, and held by image removals: none removes
	// an image a create is about to record.
	imagesMu sync.RWMutex

	standbyMu       sync.Mutex
	standby         *standby // a supervisor waiting for its sandbox (standby.go)
	standbyStarting bool
	closed          bool
}

var (
	_ driver.Driver         = (*Driver)(nil)
	_ driver.Watcher        = (*Driver)(nil)
	_ driver.Execer         = (*Driver)(nil)
	_ driver.LogReader      = (*Driver)(nil)
	_ driver.Validator      = (*Driver)(nil)
	_ driver.Tierer         = (*Driver)(nil)
	_ driver.PortDialer     = (*Driver)(nil)
	_ driver.EgressAttacher = (*Driver)(nil)
)

// HostImage is the image name of sandboxes on the host's operating system:
// its program and library directories and /etc without secrets, read-only
// (shim.HostOSDirs); so is an empty image. The host's whole root is
// the image "/", asked for by name.
const HostImage = "host"

// object is what the driver keeps of a sandbox between incarnations.
type object struct {
	ID         string            `json:"id"`
	Name       string            `json:"name"`
	Generation int64             `json:"generation"`
	Labels     map[string]string `json:"labels"`
	RootFS     string            `json:"rootfs,omitempty"`
	// IDBase is the first of the sandbox's own 65536 host user and group
	// ids (when the gateway runs as root); 0 inside is IDBase outside.
	IDBase  uint32        `json:"id_base,omitempty"`
	Command []string      `json:"command"`
	Policy  policy.Policy `json:"policy"`
	// ImageID and Layers (diff ids, bottom first) name the OCI image the
	// sandbox runs, as it was when the incarnation was created; Env and
	// Dir are what the image says of its environment and working directory.
	ImageID string   `json:"image_id,omitempty"`
	Layers  []string `json:"layers,omitempty"`
	Env     []string `json:"env,omitempty"`
	Dir     string   `json:"dir,omitempty"`
}

// New returns a native driver.
func New(cfg driver.Config, opts Options) (*Driver, error) {
	if cfg.Label == "" {
		return nil, errors.New("native driver: no sandbox label configured")
	}
	if opts.Runsc == "" {
		opts.Runsc = "runsc"
	}
	if opts.Supervisor == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("native driver: find the corral binary: %w", err)
		}
		opts.Supervisor = exe
	}
	if err := os.RemoveAll(filepath.Join(cfg.StateDir, "trash")); err != nil {
		return nil, fmt.Errorf("native driver: %w", err)
	}
	for _, dir := range []string{"sandboxes", "run", "trash"} {
		if err := os.MkdirAll(filepath.Join(cfg.StateDir, dir), 0o700); err != nil {
			return nil, fmt.Errorf("native driver: %w", err)
		}
	}
	if os.Geteuid() == 0 && cgroups.Has("pids") {
		if err := cgroups.Create(cgroupParent, cgroups.Limits{Pids: PidsBudget()}); err != nil {
			return nil, fmt.Errorf("native driver: the host's pids budget for sandboxes: %w", err)
		}
	}
	d := &Driver{cfg: cfg, opts: opts, locks: map[string]*sync.Mutex{}}
	d.Reach = netns.Reach{NetNS: d.NetNS, Egress: cfg.Egress}
	return d, nil
}

// DefaultImageCacheBytes is the image cache's bound when Options says 0.
const DefaultImageCacheBytes = 32 << 30

// PidsBudget is how many tasks every native sandbox of the host may have
// together (their parent cgroup's pids limit): the host's pid_max less a
// reserve of an eighth (at least 1024) for the host, the gateway and the
// supervisors, so that sandboxes at their limits cannot take the host's
// last process ids.
func PidsBudget() int64 {
	pidMax := int64(32768)
	if b, err := os.ReadFile("/proc/sys/kernel/pid_max"); err == nil {
		if n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil {
			pidMax = n
		}
	}
	return pidMax - max(pidMax/8, 1024)
}

// Supported reports why this host cannot run native sandboxes, or nil.
func Supported() error {
	if os.Geteuid() == 0 {
		return nil
	}
	if data, err := os.ReadFile("/proc/sys/kernel/unprivileged_userns_clone"); err == nil && strings.TrimSpace(string(data)) == "0" {
		return errors.New("not root, and unprivileged user namespaces are disabled (kernel.unprivileged_userns_clone=0)")
	}
	if data, err := os.ReadFile("/proc/sys/user/max_user_namespaces"); err == nil && strings.TrimSpace(string(data)) == "0" {
		return errors.New("not root, and user namespaces are disabled (user.max_user_namespaces=0)")
	}
	return nil
}

// Name implements driver.Driver.
func (d *Driver) Name() string { return "native" }

// Close implements driver.Driver; supervisors keep running.
func (d *Driver) Close() error {
	d.closeStandby()
	return nil
}

// lock serializes the calls on one sandbox id; while it is held, the
// driver is busy (waitIdle).
func (d *Driver) lock(id string) func() {
	d.mu.Lock()
	l := d.locks[id]
	if l == nil {
		l = &sync.Mutex{}
		d.locks[id] = l
	}
	d.busy++
	d.mu.Unlock()
	l.Lock()
	return func() {
		l.Unlock()
		d.mu.Lock()
		d.busy--
		d.lastBusy = time.Now()
		d.mu.Unlock()
	}
}

// waitIdle returns once no call of the driver has run for idle, or after
// limit: background work (a standby's start) waits for a gap between
// calls instead of taking the CPU from the next one.
func (d *Driver) waitIdle(idle, limit time.Duration) {
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(idle / 4) {
		d.mu.Lock()
		quiet := d.busy == 0 && time.Since(d.lastBusy) >= idle
		d.mu.Unlock()
		if quiet {
			return
		}
	}
}

func (d *Driver) sandboxDir(id string) string {
	return filepath.Join(d.cfg.StateDir, "sandboxes", id)
}

func (d *Driver) bundle(id string, gen int64) shim.Bundle {
	return shim.Bundle{Dir: filepath.Join(d.sandboxDir(id), "gen-"+strconv.FormatInt(gen, 10))}
}

// socket is the control socket of one incarnation, named by id and
// generation.
func (d *Driver) socket(id string, gen int64) string {
	return filepath.Join(d.cfg.StateDir, "run", id+"-"+strconv.FormatInt(gen, 10)+".sock")
}

// cgroup names the cgroup of a sandbox.
func cgroup(id string) string { return cgroupParent + "/" + id }

// workload names the group of a sandbox's processes under its cgroup (its
// supervisor's is beside it): what a pause freezes.
func workload(id string) string { return cgroup(id) + "/sandbox" }

// cgroupParent is the cgroup of every native sandbox's cgroup.
const cgroupParent = "corral"

// load reads the object of id; another gateway's object (another label)
// is not found.
func (d *Driver) load(id string) (*object, error) {
	o, err := d.loadAny(id)
	if err != nil {
		return nil, err
	}
	if o.Labels[d.cfg.Label] != "true" {
		return nil, errdefs.NotFound("no native sandbox %s with label %s", id, d.cfg.Label)
	}
	return o, nil
}

// loadAny reads the object of id, whichever gateway's it is.
func (d *Driver) loadAny(id string) (*object, error) {
	if !validID(id) {
		return nil, errdefs.NotFound("no native sandbox %q", id)
	}
	data, err := os.ReadFile(filepath.Join(d.sandboxDir(id), "object.json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, errdefs.NotFound("no native sandbox %s", id)
	}
	if err != nil {
		return nil, fmt.Errorf("native driver: %w", err)
	}
	var o object
	if err := json.Unmarshal(data, &o); err != nil {
		return nil, fmt.Errorf("native driver: object of %s: %w", id, err)
	}
	return &o, nil
}

// validID keeps ids from naming paths outside the state directory.
func validID(id string) bool {
	return id != "" && !strings.ContainsAny(id, "/\\") && id != "." && id != ".."
}

func (d *Driver) save(o *object) error {
	data, err := json.Marshal(o)
	if err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(d.sandboxDir(o.ID), "object.json"), data, 0o600)
}

// generations lists the incarnations that have a bundle, oldest first.
func (d *Driver) generations(id string) []int64 {
	entries, _ := os.ReadDir(d.sandboxDir(id))
	var gens []int64
	for _, e := range entries {
		if g, ok := strings.CutPrefix(e.Name(), "gen-"); ok {
			if n, err := strconv.ParseInt(g, 10, 64); err == nil {
				gens = append(gens, n)
			}
		}
	}
	slices.Sort(gens)
	return gens
}

// alive reports whether the supervisor of an incarnation lives.
func alive(b shim.Bundle) (bool, error) {
	return shim.Alive(b.Path(shim.LockFile))
}

// observe is the driver's view of an object.
func (d *Driver) observe(o *object) (driver.Object, error) {
	obj := driver.Object{ID: o.ID, Generation: o.Generation, Labels: o.Labels, State: driver.StateCreated}
	b := d.bundle(o.ID, o.Generation)
	live, err := alive(b)
	if err != nil {
		return obj, err
	}
	if live {
		obj.State = driver.StateRunning
		if frozen, err := cgroups.Frozen(workload(o.ID)); err != nil {
			return obj, err
		} else if frozen {
			obj.State = driver.StatePaused
		}
		if _, err := os.Stat(b.Path(shim.PausedFile)); err == nil {
			obj.State = driver.StatePaused // checkpointed out
		}
		if data, err := os.ReadFile(b.Path(supervisor.ProtectionsFile)); err == nil {
			obj.Protections = string(data)
		}
		if r := o.ids(); r != nil && !o.Policy.GVisor() {
			obj.Protections += fmt.Sprintf("; user namespace (host ids %d-%d)", r.Base, r.Base+r.Size-1)
		}
		return obj, nil
	}
	if exit, err := b.ReadExit(); err == nil {
		obj.State, obj.ExitCode = driver.StateStopped, exit.Code
		return obj, nil
	}
	if _, err := os.Stat(b.Path(shim.PIDFile)); err == nil {
		obj.State = driver.StateFailed
		obj.Message = fmt.Sprintf("the supervisor of generation %d ended without recording its main process's exit (killed?)%s",
			o.Generation, shim.LastLine(b.Path(shim.SupervisorLog)))
	}
	return obj, nil
}

// Inspect implements driver.Driver.
func (d *Driver) Inspect(ctx context.Context, id string) (driver.Object, error) {
	if err := ctx.Err(); err != nil {
		return driver.Object{}, err
	}
	o, err := d.load(id)
	if err != nil {
		return driver.Object{}, err
	}
	return d.observe(o)
}

// List implements driver.Driver.
func (d *Driver) List(ctx context.Context) ([]driver.Object, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(filepath.Join(d.cfg.StateDir, "sandboxes"))
	if err != nil {
		return nil, fmt.Errorf("native driver: %w", err)
	}
	var objs []driver.Object
	for _, e := range entries {
		o, err := d.load(e.Name())
		if errors.Is(err, errdefs.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		obj, err := d.observe(o)
		if err != nil {
			return nil, err
		}
		objs = append(objs, obj)
	}
	return objs, nil
}

// Validate implements driver.Validator.
func (d *Driver) Validate(spec driver.Spec) error {
	_, _, err := d.check(spec)
	return err
}

// check validates a spec and returns its root file system and policy.
func (d *Driver) check(spec driver.Spec) (string, policy.Policy, error) {
	rootfs, err := d.rootFS(spec.Image)
	if err != nil {
		return "", policy.Policy{}, err
	}
	if len(spec.Command) == 0 && !ociImage(spec.Image) {
		return "", policy.Policy{}, errdefs.InvalidArgument("sandbox %s has no command: the native driver needs one after -- (only OCI images bring their own)", spec.Name)
	}
	if err := d.checkGVisor(spec.Policy); err != nil {
		return "", policy.Policy{}, err
	}
	return rootfs, spec.Policy, nil
}

// Create implements driver.Driver.
func (d *Driver) Create(ctx context.Context, spec driver.Spec) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if !validID(spec.ID) {
		return errdefs.InvalidArgument("invalid sandbox id %q", spec.ID)
	}
	rootfs, pol, err := d.check(spec)
	if err != nil {
		return err
	}
	defer d.lock(spec.ID)()

	old, err := d.load(spec.ID)
	switch {
	case errors.Is(err, errdefs.ErrNotFound):
		if _, serr := os.Stat(filepath.Join(d.sandboxDir(spec.ID), "object.json")); serr == nil {
			return errdefs.AlreadyExists("sandbox id %s belongs to another gateway (not label %s)", spec.ID, d.cfg.Label)
		}
	case err != nil:
		return err
	case old.Generation == spec.Generation:
		return nil // adopt
	default:
		for _, g := range d.generations(spec.ID) {
			if live, err := alive(d.bundle(spec.ID, g)); err != nil || live {
				return errdefs.FailedPrecondition("sandbox %s still runs generation %d", spec.ID, g)
			}
		}
		if err := d.removeBundles(spec.ID); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(filepath.Join(d.sandboxDir(spec.ID), "workdir"), 0o755); err != nil {
		return fmt.Errorf("native create: %w", err)
	}
	o := &object{
		ID: spec.ID, Name: spec.Name, Generation: spec.Generation, RootFS: rootfs,
		Labels: d.cfg.ObjectLabels(spec), Command: spec.Command, Policy: pol,
	}
	if old != nil {
		o.IDBase = old.IDBase // its files in /sandbox keep their owners
	}
	if !ociImage(spec.Image) {
		return d.saveNew(o)
	}
	err = func() error {
		d.imagesMu.RLock()
		defer d.imagesMu.RUnlock()
		if err := d.useImage(ctx, o, spec.Image); err != nil {
			return err
		}
		return d.saveNew(o)
	}()
	if err == nil {
		// The sandbox is made: a cache that cannot shrink now is tried
		// again after the next pull, and is not this create's failure.
		_ = d.evictImages(o.ImageID)
	}
	return err
}

// rootFS checks an image name: the host's operating system, or a root
// file system directory outside the gateway's home.
func (d *Driver) rootFS(image string) (string, error) {
	if image == "" || image == HostImage {
		return "", nil
	}
	if ociImage(image) {
		return "", d.checkOCI(image)
	}
	fi, err := os.Stat(image)
	if err != nil || !fi.IsDir() {
		return "", errdefs.InvalidArgument("root file system %s is not a directory", image)
	}
	for _, hidden := range d.opts.Hide {
		if rel, ok := shim.Within(hidden, image); ok {
			return "", errdefs.InvalidArgument("root file system %s is inside the gateway's home %s (at %s): a sandbox may not see it", image, hidden, rel)
		}
	}
	return filepath.Clean(image), nil
}

// removeBundles removes the bundles and sockets of every (gone)
// incarnation of id.
func (d *Driver) removeBundles(id string) error {
	for _, g := range d.generations(id) {
		if err := os.RemoveAll(d.bundle(id, g).Dir); err != nil {
			return fmt.Errorf("native driver: %w", err)
		}
		if err := os.Remove(d.socket(id, g)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("native driver: %w", err)
		}
	}
	return nil
}

// Delete implements driver.Driver: every incarnation is killed, then the
// sandbox's files and cgroup go.
func (d *Driver) Delete(ctx context.Context, id string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	defer d.lock(id)()
	o, err := d.load(id)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil
	} else if err != nil {
		return err
	}
	for _, g := range d.generations(id) {
		if err := d.stopIncarnation(ctx, id, g, driver.StopOptions{Force: true}); err != nil {
			return err
		}
	}
	if err := removeCgroup(ctx, id); err != nil {
		return err
	}
	if err := d.removeBundles(id); err != nil {
		return err
	}
	// One rename makes the object gone; what a crash leaves in the trash
	// goes at the next start.
	trash := filepath.Join(d.cfg.StateDir, "trash", id)
	if err := os.RemoveAll(trash); err != nil {
		return fmt.Errorf("native delete: %w", err)
	}
	if err := os.Rename(d.sandboxDir(id), trash); err != nil {
		return fmt.Errorf("native delete: %w", err)
	}
	if err := d.release(id, o.IDBase); err != nil {
		return fmt.Errorf("native delete: %w", err)
	}
	if err := os.RemoveAll(trash); err != nil {
		return fmt.Errorf("native delete: %w", err)
	}
	return nil
}
