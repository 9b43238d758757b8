package native

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/corral-sandbox/corral/internal/atomicfile"
	"github.com/corral-sandbox/corral/internal/cgroups"
	"github.com/corral-sandbox/corral/internal/control"
	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/driver/native/shim"
	"github.com/corral-sandbox/corral/internal/errdefs"
)

var (
	_ driver.Checkpointer = (*Driver)(nil)
	_ driver.MemoryPauser = (*Driver)(nil)
)

// restoreWait bounds the restore in place that ends a checkpoint.
const restoreWait = 5 * time.Minute

// Checkpoint implements driver.Checkpointer through the supervisor's
// OpCheckpoint: runsc writes the image in the bundle, the supervisor holds the sandbox
// stopped while this connection is open and restores it in place when
// resume writes to it or it closes (a gateway that dies lets the sandbox
// go on by itself). The sandbox's lock is not held over the hold: a stop
// or a delete goes through meanwhile.
func (d *Driver) Checkpoint(ctx context.Context, ref driver.Ref) (string, func() error, error) {
	c, path, err := d.checkpoint(ctx, ref, false)
	if err != nil {
		return "", nil, err
	}
	return filepath.Join(path, driver.MemoryImage), func() error {
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(restoreWait))
		if err := c.Send(control.Request{Op: control.OpCheckpoint}); err != nil {
			return fmt.Errorf("native checkpoint of %s: let it go on: %w", ref.ID, err)
		}
		r, err := c.Recv()
		if err == nil && r.Error != "" {
			err = fmt.Errorf("%s", r.Error)
		}
		if err != nil {
			return fmt.Errorf("native checkpoint of %s: restore in place: %w", ref.ID, err)
		}
		return nil
	}, nil
}

// PauseMemory implements driver.MemoryPauser through the supervisor's
// OpCheckpoint with Pause: it holds the processes checkpointed out (runsc
// ends the container, and its memory with it), and marks the bundle
// paused, until Resume's OpResume or a stop, whatever becomes of the
// gateway.
func (d *Driver) PauseMemory(ctx context.Context, ref driver.Ref) error {
	unlock := d.lock(ref.ID)
	frozen, err := cgroups.Frozen(workload(ref.ID))
	unlock()
	if err != nil {
		return err
	}
	if frozen {
		return errdefs.FailedPrecondition("sandbox %s is frozen in place: resume it before it is paused with its memory out", ref.ID)
	}
	c, _, err := d.checkpoint(ctx, ref, true)
	if err != nil {
		return err
	}
	return c.Close()
}

// checkpoint asks the supervisor of ref for a checkpoint (a pause's, with
// pause) and returns the connection and the image's directory once it is
// written.
func (d *Driver) checkpoint(ctx context.Context, ref driver.Ref, pause bool) (*control.Conn, string, error) {
	c, err := d.dialLive(ref)
	if err != nil {
		return nil, "", err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	if err := c.Send(control.Request{Op: control.OpCheckpoint, Pause: pause}); err != nil {
		c.Close()
		return nil, "", fmt.Errorf("native checkpoint: %w", err)
	}
	r, err := c.Recv()
	switch {
	case err != nil:
		c.Close()
		return nil, "", fmt.Errorf("native checkpoint of %s: %w", ref.ID, err)
	case r.Error != "":
		c.Close()
		return nil, "", errdefs.FailedPrecondition("sandbox %s: %s", ref.ID, r.Error)
	case r.State != control.StateCheckpointed:
		c.Close()
		return nil, "", fmt.Errorf("native checkpoint of %s: the supervisor answered %q", ref.ID, r.State)
	}
	_ = c.SetDeadline(time.Time{})
	return c, r.Path, nil
}

// dialLive connects to the supervisor of ref, which must live. The
// sandbox's lock is held only while it is looked up.
func (d *Driver) dialLive(ref driver.Ref) (*control.Conn, error) {
	unlock := d.lock(ref.ID)
	_, live, err := d.incarnation(ref)
	unlock()
	if err != nil {
		return nil, err
	}
	if !live {
		return nil, errdefs.NotFound("sandbox %s generation %d does not run", ref.ID, ref.Generation)
	}
	c, err := control.Dial(d.socket(ref.ID, ref.Generation))
	if err != nil {
		return nil, errdefs.FailedPrecondition("sandbox %s is not running: %v", ref.ID, err)
	}
	return c, nil
}

// resumeMemory restores the processes a pause checkpointed out, through
// the supervisor's OpResume.
func (d *Driver) resumeMemory(ctx context.Context, ref driver.Ref) error {
	c, err := d.dialLive(ref)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(restoreWait))
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	if err := c.Send(control.Request{Op: control.OpResume}); err != nil {
		return fmt.Errorf("native resume of %s: %w", ref.ID, err)
	}
	r, err := c.Recv()
	if err == nil && r.Error != "" {
		err = fmt.Errorf("%s", r.Error)
	}
	if err != nil {
		return fmt.Errorf("native resume of %s from its memory checkpoint: %w", ref.ID, err)
	}
	return nil
}

// SeedMemory implements driver.Checkpointer: the image goes into the
// incarnation's bundle, where its supervisor's first start finds it.
func (d *Driver) SeedMemory(ctx context.Context, ref driver.Ref, image io.Reader) error {
	_, unlock, err := d.unstarted(ctx, ref, "a memory image")
	if err != nil {
		return err
	}
	defer unlock()
	dir := d.bundle(ref.ID, ref.Generation).Path(shim.RestoreDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return atomicfile.WriteVolatileFrom(filepath.Join(dir, driver.MemoryImage), image, 0o600)
}
