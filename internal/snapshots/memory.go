package snapshots

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

// takeMemory snapshots a ready sandbox's processes and memory with its
// /sandbox: the driver checkpoints it and holds its processes stopped
// while the files are copied, so both are of one instant, then lets it go
// on from where it was. A gateway that dies meanwhile leaves a creating
// record, which Recover removes; the driver's hold ends with the gateway,
// and the sandbox goes on by itself.
func (s *Snapshots) takeMemory(ctx context.Context, nameOrID, name string) (*sandbox.Snapshot, error) {
	cp, ok := s.driver.(driver.Checkpointer)
	if !ok {
		return nil, errdefs.NotImplemented("the %s driver cannot checkpoint memory: only native's gVisor tier can (with lifecycle.memory_snapshots: true); "+
			"take the snapshot without --memory: /sandbox's files", s.driver.Name())
	}
	sb, err := s.records.Get(ctx, nameOrID)
	if err != nil {
		return nil, err
	}
	if sb.Desired != sandbox.DesiredRunning || sb.Phase != sandbox.PhaseReady {
		return nil, errdefs.FailedPrecondition("sandbox %q is %s: a memory snapshot is taken of a ready sandbox's running processes", sb.Name, sb.Phase)
	}
	snap := newSnapshot(sb, name)
	if err := s.store.CreateSnapshot(ctx, snap); err != nil {
		return nil, err
	}
	release := s.content.Hold()
	defer release()
	begun := time.Now()
	err = func() error {
		imagePath, resume, err := cp.Checkpoint(ctx, driver.Ref{ID: sb.ID, Generation: sb.Generation})
		if err != nil {
			return fmt.Errorf("memory snapshot %q of %q: %w", name, sb.Name, err)
		}
		checkpointed := time.Since(begun)
		// Files and image are stored while the processes are held: the
		// image is the supervisor's until it restores from it.
		var (
			manifest string
			st       Stats
		)
		image, size, err := s.content.PutFile(imagePath)
		if err != nil {
			err = fmt.Errorf("its image: %w", err)
		} else {
			var root *os.Root
			var done func()
			if root, done, err = s.openWorkdir(ctx, sb); err == nil {
				manifest, st, err = s.content.Capture(ctx, root) // made the image durable too
				done()
			}
		}
		if rerr := resume(); rerr != nil {
			s.log.Error("a sandbox after its memory snapshot", "sandbox", sb.Name, "snapshot", name, "err", rerr)
			if err == nil {
				err = rerr
			}
		}
		if err != nil {
			return fmt.Errorf("memory snapshot %q of %q: %w", name, sb.Name, err)
		}
		snap.Manifest, snap.Files, snap.Bytes, snap.Spec.Memory = manifest, st.Files, st.Bytes+size, image
		s.log.Info("memory checkpoint", "sandbox", sb.Name, "snapshot", name, "checkpoint", checkpointed, "held", time.Since(begun), "image_bytes", size)
		return s.store.FinishSnapshot(ctx, snap)
	}()
	if err != nil {
		s.forget(ctx, snap)
		return nil, err
	}
	return snap, nil
}
