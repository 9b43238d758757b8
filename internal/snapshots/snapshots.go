// Package snapshots keeps snapshots of sandboxes for every front end: a
// sandbox's /sandbox at one instant (paused for the copy when it runs)
// with what it was created with, in a content-addressed store; new
// sandboxes made from one, on any driver; forks; export and import as one
// archive. A snapshot's record is written, as creating, before its files
// are copied and becomes ready only once its manifest is durable, so one
// cut short is never listed, and Recover removes it (resuming the sandbox
// it had paused) when the next gateway starts.
package snapshots

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/corral-sandbox/corral/internal/caller"
	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/lifecycle"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

// Records is what snapshots need of the lifecycle (*lifecycle.Manager).
type Records interface {
	Get(ctx context.Context, nameOrID string) (*sandbox.Sandbox, error)
	Create(ctx context.Context, name, requestID string, spec sandbox.Spec) (*sandbox.Sandbox, bool, error)
	Pause(ctx context.Context, nameOrID string, memory bool) (*sandbox.Sandbox, error)
	Resume(ctx context.Context, nameOrID string) (*sandbox.Sandbox, error)
	Wait(ctx context.Context, nameOrID string, goal lifecycle.Goal, since int64, progress func(*sandbox.Sandbox)) (*sandbox.Sandbox, error)
}

// Store keeps snapshots' records (the gateway's store).
type Store interface {
	CreateSnapshot(ctx context.Context, s *sandbox.Snapshot) error
	FinishSnapshot(ctx context.Context, s *sandbox.Snapshot) error
	GetSnapshot(ctx context.Context, tenant, nameOrID string) (*sandbox.Snapshot, error)
	ListSnapshots(ctx context.Context, tenant string) ([]*sandbox.Snapshot, error)
	DeleteSnapshot(ctx context.Context, id string) error
	ListSandboxes(ctx context.Context, tenant string) ([]*sandbox.Sandbox, error)
}

// Snapshots is the snapshot part of the core.
type Snapshots struct {
	records Records
	store   Store
	driver  driver.Driver
	content *Content
	log     *slog.Logger

	mu         sync.Mutex
	collecting bool // a collection runs or waits for the store
	again      bool // another was asked for meanwhile
}

// New is the snapshots of the sandboxes of records, run by drv, kept in
// store (records) and content (files).
func New(records Records, st Store, drv driver.Driver, content *Content, log *slog.Logger) *Snapshots {
	return &Snapshots{records: records, store: st, driver: drv, content: content, log: log}
}

// MaxForks bounds the sandboxes one fork makes.
const MaxForks = 64

// cleanupTimeout bounds what is undone after a snapshot that failed.
const cleanupTimeout = 30 * time.Second

// collectWait bounds how long a collection waits for the snapshots being
// written; the next one removes what it left.
const collectWait = 10 * time.Minute

// Take snapshots the /sandbox of a sandbox as name. A running sandbox is
// paused for the copy and resumed after it; a stopped one is copied as it
// is. memory asks for a checkpoint of its processes too.
func (s *Snapshots) Take(ctx context.Context, nameOrID, name string, memory bool) (*sandbox.Snapshot, error) {
	if err := sandbox.ValidateSnapshotName(name); err != nil {
		return nil, err
	}
	if memory {
		return s.takeMemory(ctx, nameOrID, name)
	}
	_, opens := s.driver.(driver.WorkdirOpener)
	if _, ok := s.driver.(driver.Workdirs); !ok && !opens {
		return nil, errdefs.NotImplemented("the %s driver cannot reach sandboxes' files from the gateway: it cannot take snapshots", s.driver.Name())
	}
	sb, err := s.records.Get(ctx, nameOrID)
	if err != nil {
		return nil, err
	}
	if sb.Desired == sandbox.DesiredRunning && (sb.Phase == sandbox.PhaseProvisioning || sb.Phase == sandbox.PhaseStarting) {
		// on its way to ready (just resumed, or started): the copy waits
		if sb, err = s.records.Wait(ctx, sb.ID, lifecycle.GoalRunning, sb.Revision, nil); err != nil {
			return nil, err
		}
	}
	pause := false
	switch {
	case sb.Desired == sandbox.DesiredDeleted:
		return nil, errdefs.FailedPrecondition("sandbox %q is being deleted", sb.Name)
	case sb.Desired == sandbox.DesiredRunning && sb.Phase == sandbox.PhaseReady:
		pause = true
	case sb.Phase == sandbox.PhasePaused, sb.Phase == sandbox.PhaseStopped, sb.Phase == sandbox.PhaseExited:
	default:
		return nil, errdefs.FailedPrecondition("sandbox %q is %s: a snapshot is taken of a ready, paused or stopped sandbox", sb.Name, sb.Phase)
	}
	snap := newSnapshot(sb, name)
	if pause {
		snap.Paused = sb.ID
	}
	if err := s.store.CreateSnapshot(ctx, snap); err != nil {
		return nil, err
	}
	resumed := !pause
	resume := func() {
		if resumed {
			return
		}
		resumed = true
		c, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		r, err := s.records.Resume(c, sb.ID)
		if err == nil {
			_, err = s.records.Wait(c, sb.ID, lifecycle.GoalRunning, r.Revision, nil) // returned as it was: ready
		}
		if err != nil {
			s.log.Error("resume a sandbox after its snapshot", "sandbox", sb.Name, "snapshot", name, "err", err)
		}
	}
	release := s.content.Hold()
	defer release()
	err = func() error {
		if pause {
			p, err := s.records.Pause(ctx, sb.ID, false)
			if err != nil {
				return err
			}
			if _, err := s.records.Wait(ctx, sb.ID, lifecycle.GoalPaused, p.Revision, nil); err != nil {
				return fmt.Errorf("pause %q for its snapshot: %w", sb.Name, err)
			}
		}
		root, done, err := s.openWorkdir(ctx, sb)
		if err != nil {
			return err
		}
		manifest, st, err := s.content.Capture(ctx, root)
		done()
		resume()
		if err != nil {
			return fmt.Errorf("snapshot %q of %q: %w", name, sb.Name, err)
		}
		snap.Manifest, snap.Files, snap.Bytes = manifest, st.Files, st.Bytes
		return s.store.FinishSnapshot(ctx, snap)
	}()
	resume()
	if err != nil {
		s.forget(ctx, snap)
		if now, gerr := s.records.Get(context.WithoutCancel(ctx), sb.ID); ctx.Err() == nil && (gerr != nil || now.Desired == sandbox.DesiredDeleted) {
			return nil, errdefs.FailedPrecondition("sandbox %q was deleted during its snapshot", sb.Name)
		}
		return nil, err
	}
	s.log.Info("snapshot taken", "snapshot", name, "sandbox", sb.Name, "files", snap.Files, "bytes", snap.Bytes)
	return snap, nil
}

// newSnapshot is the record of a snapshot named name of sb, being taken:
// what sb was created with, but what it was made from.
func newSnapshot(sb *sandbox.Sandbox, name string) *sandbox.Snapshot {
	spec := sb.Spec
	spec.Seed, spec.SeedFrom, spec.Memory = "", "", ""
	return &sandbox.Snapshot{ID: sandbox.NewID(), Tenant: sb.Tenant, Name: name, State: sandbox.SnapshotCreating,
		Source: sb.ID, SourceName: sb.Name, Spec: spec, CreatedAt: time.Now().UTC()}
}

// openWorkdir opens a sandbox's /sandbox from the gateway's host, through
// the driver's WorkdirOpener when it has one (a disk image included), else
// its Workdirs directory, and returns what releases it.
func (s *Snapshots) openWorkdir(ctx context.Context, sb *sandbox.Sandbox) (*os.Root, func(), error) {
	if o, ok := s.driver.(driver.WorkdirOpener); ok {
		root, release, err := o.OpenWorkdir(ctx, sb.ID)
		if err != nil {
			return nil, nil, err
		}
		return root, func() { root.Close(); release() }, nil
	}
	dir, err := s.driver.(driver.Workdirs).Workdir(ctx, sb.ID)
	if err != nil {
		return nil, nil, err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("sandbox %q: open its /sandbox: %w", sb.Name, err)
	}
	return root, func() { root.Close() }, nil
}

// forget removes the record of a snapshot that failed.
func (s *Snapshots) forget(ctx context.Context, snap *sandbox.Snapshot) {
	c, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if err := s.store.DeleteSnapshot(c, snap.ID); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		s.log.Error("remove a failed snapshot's record", "snapshot", snap.Name, "err", err)
	}
	s.collect(c) // the files it wrote, unless another snapshot has them
}

// Get returns a ready snapshot of the caller's tenant by name or id.
func (s *Snapshots) Get(ctx context.Context, nameOrID string) (*sandbox.Snapshot, error) {
	snap, err := s.store.GetSnapshot(ctx, caller.From(ctx).Scope(), nameOrID)
	if err == nil && snap.State != sandbox.SnapshotReady {
		err = errdefs.ErrNotFound
	}
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil, errdefs.NotFound("snapshot %q not found", nameOrID)
	}
	return snap, err
}

// List returns the ready snapshots of the caller's tenant, oldest first.
func (s *Snapshots) List(ctx context.Context) ([]*sandbox.Snapshot, error) {
	all, err := s.store.ListSnapshots(ctx, caller.From(ctx).Scope())
	if err != nil {
		return nil, err
	}
	ready := all[:0]
	for _, snap := range all {
		if snap.State == sandbox.SnapshotReady {
			ready = append(ready, snap)
		}
	}
	return ready, nil
}

// Delete removes a snapshot and then the files nothing else keeps.
func (s *Snapshots) Delete(ctx context.Context, nameOrID string) (*sandbox.Snapshot, error) {
	snap, err := s.Get(ctx, nameOrID)
	if err != nil {
		return nil, err
	}
	if err := s.store.DeleteSnapshot(ctx, snap.ID); err != nil {
		return nil, err
	}
	s.collect(ctx)
	return snap, nil
}

// collect removes, in the background, the blobs that no snapshot and no
// sandbox still being made from one names, once no snapshot is being
// written. One asked for while another runs makes it run once more, after.
func (s *Snapshots) collect(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.collecting {
		s.again = true
		return
	}
	s.collecting = true
	go func() {
		for {
			s.collectNow(context.WithoutCancel(ctx))
			s.mu.Lock()
			again := s.again
			s.again, s.collecting = false, again
			s.mu.Unlock()
			if !again {
				return
			}
		}
	}()
}

// collectNow is collect, waiting for it.
func (s *Snapshots) collectNow(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, collectWait)
	defer cancel()
	n, err := s.content.Collect(ctx, func() ([]string, []string, error) {
		snaps, err := s.store.ListSnapshots(ctx, "")
		if err != nil {
			return nil, nil, err
		}
		var keep, images []string
		for _, snap := range snaps {
			if snap.Manifest != "" {
				keep = append(keep, snap.Manifest)
			}
			if snap.Spec.Memory != "" {
				images = append(images, snap.Spec.Memory)
			}
		}
		sbs, err := s.store.ListSandboxes(ctx, "")
		if err != nil {
			return nil, nil, err
		}
		for _, sb := range sbs {
			if sb.Spec.Seed != "" {
				keep = append(keep, sb.Spec.Seed)
			}
			if sb.Spec.Memory != "" {
				images = append(images, sb.Spec.Memory)
			}
		}
		return keep, images, nil
	})
	if err != nil {
		s.log.Error("collect snapshots' files", "err", err)
	} else if n > 0 {
		s.log.Info("snapshots' files collected", "blobs", n)
	}
}

// CreateFrom records a sandbox made from a snapshot: spec's image,
// command, labels, policy and restart policy, where set, override the
// snapshot's.
func (s *Snapshots) CreateFrom(ctx context.Context, snapshot, name, requestID string, spec sandbox.Spec) (*sandbox.Sandbox, bool, error) {
	release := s.content.Hold() // its files stay until the record names them
	defer release()
	snap, err := s.Get(ctx, snapshot)
	if err != nil {
		return nil, false, err
	}
	return s.records.Create(ctx, name, requestID, merge(snap, spec))
}

// merge is the spec of a sandbox made from snap, with what spec sets.
func merge(snap *sandbox.Snapshot, spec sandbox.Spec) sandbox.Spec {
	out := snap.Spec
	if spec.Image != "" {
		out.Image = spec.Image
	}
	if len(spec.Command) > 0 {
		out.Command = spec.Command
	}
	if spec.Labels != nil {
		out.Labels = spec.Labels
	}
	if spec.Policy != "" {
		out.Policy = spec.Policy
	}
	if spec.RestartPolicy != "" {
		out.RestartPolicy, out.MaxRestarts = spec.RestartPolicy, spec.MaxRestarts
	}
	if spec.Hosts != nil {
		out.Hosts = spec.Hosts
	}
	out.Seed, out.SeedFrom = snap.Manifest, snap.Name
	return out
}

// Fork takes a snapshot of a sandbox and makes count sandboxes from it,
// prefix-1 … prefix-N, in parallel, with labels when set (else the
// sandbox's); the snapshot goes once they are recorded (its files stay
// while they are being put in).
func (s *Snapshots) Fork(ctx context.Context, nameOrID string, count int, prefix string, labels map[string]string) ([]*sandbox.Sandbox, error) {
	if count < 1 || count > MaxForks {
		return nil, errdefs.InvalidArgument("invalid fork count %d: want 1 to %d", count, MaxForks)
	}
	sb, err := s.records.Get(ctx, nameOrID)
	if err != nil {
		return nil, err
	}
	if prefix == "" {
		prefix = sb.Name + "-fork"
	}
	names := make([]string, count)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%d", prefix, i+1)
		if err := sandbox.ValidateName(names[i]); err != nil {
			return nil, err
		}
		if _, err := s.records.Get(ctx, names[i]); !errors.Is(err, errdefs.ErrNotFound) {
			if err == nil {
				err = errdefs.AlreadyExists("sandbox %q already exists: fork with another --name-prefix", names[i])
			}
			return nil, err
		}
	}
	snapName := "fork-" + sandbox.ShortID(sandbox.NewID())
	snap, err := s.Take(ctx, sb.ID, snapName, false)
	if err != nil {
		return nil, err
	}
	defer func() {
		c, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		if err := s.store.DeleteSnapshot(c, snap.ID); err != nil {
			s.log.Error("remove a fork's snapshot", "snapshot", snapName, "err", err)
		}
		s.collect(c) // what the forks do not still need
	}()
	out := make([]*sandbox.Sandbox, count)
	errs := make([]error, count)
	done := make(chan struct{})
	for i := range count {
		go func() {
			defer func() { done <- struct{}{} }()
			spec := merge(snap, sandbox.Spec{Labels: labels})
			spec.SeedFrom = sb.Name + " (a fork)"
			out[i], _, errs[i] = s.records.Create(ctx, names[i], "", spec)
		}()
	}
	for range count {
		<-done
	}
	var failed []error
	for i, err := range errs {
		if err != nil {
			failed = append(failed, fmt.Errorf("%s: %w", names[i], err))
		}
	}
	if len(failed) > 0 {
		// the errors keep their classes: a name taken meanwhile is AlreadyExists
		return out, fmt.Errorf("fork of %q: %d of %d not made: %w", sb.Name, len(failed), count, errors.Join(failed...))
	}
	return out, nil
}

// Export writes a snapshot as one archive.
// A snapshot deleted meanwhile may lose its files under the export, which
// then fails saying which is missing.
func (s *Snapshots) Export(ctx context.Context, nameOrID string, w io.Writer) error {
	snap, err := s.Get(ctx, nameOrID)
	if err != nil {
		return err
	}
	// Files only: a memory image is runsc's own state, which its restore
	// trusts; one imported from an archive would let whoever wrote it
	// choose the state of a gVisor kernel of this host.
	spec := snap.Spec
	spec.Memory = ""
	meta := Meta{Name: snap.Name, SourceName: snap.SourceName, Spec: spec, CreatedAt: snap.CreatedAt, Files: snap.Files, Bytes: snap.Bytes}
	return s.content.Export(ctx, w, meta, snap.Manifest)
}

// Import reads an exported archive into a snapshot of the caller's
// tenant, named name or else as the archive says.
func (s *Snapshots) Import(ctx context.Context, name string, r io.Reader) (*sandbox.Snapshot, error) {
	if name != "" {
		if err := sandbox.ValidateSnapshotName(name); err != nil {
			return nil, err
		}
	}
	release := s.content.Hold()
	defer release()
	meta, manifest, st, err := s.content.Import(ctx, r)
	if err != nil {
		return nil, err
	}
	if name == "" {
		name = meta.Name
	}
	if err := sandbox.ValidateSnapshotName(name); err != nil {
		return nil, fmt.Errorf("the archive's name: %w (give one with --name)", err)
	}
	spec := meta.Spec
	spec.Seed, spec.SeedFrom, spec.Memory = "", "", "" // files only (Export)
	snap := &sandbox.Snapshot{ID: sandbox.NewID(), Tenant: caller.From(ctx).Tenant, Name: name, State: sandbox.SnapshotCreating,
		SourceName: meta.SourceName, Spec: spec, CreatedAt: time.Now().UTC()}
	if err := s.store.CreateSnapshot(ctx, snap); err != nil {
		return nil, err
	}
	snap.Manifest, snap.Files, snap.Bytes = manifest, st.Files, st.Bytes
	if err := s.store.FinishSnapshot(ctx, snap); err != nil {
		s.forget(ctx, snap)
		return nil, err
	}
	return snap, nil
}

// Recover removes what snapshots cut short by the previous gateway left:
// their records (never listed), the sandboxes they paused resumed, and
// files no snapshot keeps. It runs at the start, before requests. A
// sandbox it cannot resume stays paused, which its log line says; nothing
// of it keeps the gateway from serving.
func (s *Snapshots) Recover(ctx context.Context) error {
	snaps, err := s.store.ListSnapshots(ctx, "")
	if err != nil {
		return err
	}
	for _, snap := range snaps {
		if snap.State == sandbox.SnapshotReady {
			continue
		}
		if snap.Paused != "" {
			sb, err := s.records.Get(ctx, snap.Paused)
			if err == nil && sb.Desired == sandbox.DesiredPaused {
				if _, err := s.records.Resume(ctx, sb.ID); err != nil {
					s.log.Error("a sandbox paused by a snapshot cut short could not be resumed: resume it (corral sandbox resume)",
						"sandbox", sb.Name, "snapshot", snap.Name, "err", err)
				} else {
					s.log.Info("sandbox resumed after a snapshot cut short", "sandbox", sb.Name, "snapshot", snap.Name)
				}
			}
		}
		if err := s.store.DeleteSnapshot(ctx, snap.ID); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			return err
		}
		s.log.Info("snapshot cut short removed", "snapshot", snap.Name)
	}
	s.collect(ctx)
	return nil
}
