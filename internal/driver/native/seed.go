package native

import (
	"context"
	"fmt"
	"io"
	"path/filepath"

	"github.com/corral-sandbox/corral/internal/diskimage"
	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/safetar"
)

var _ driver.Seeder = (*Driver)(nil)

// unstarted locks the created incarnation ref, which has not started, for
// what is put in it before its start, and returns it and its unlock.
func (d *Driver) unstarted(ctx context.Context, ref driver.Ref, what string) (*object, func(), error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	unlock := d.lock(ref.ID)
	o, live, err := d.incarnation(ref)
	if err == nil && live {
		err = errdefs.FailedPrecondition("sandbox %s runs: %s is put in before it starts", ref.ID, what)
	}
	if err != nil {
		unlock()
		return nil, nil, err
	}
	return o, unlock, nil
}

// Seed implements driver.Seeder: into the workdir directory, or, for a
// sandbox with limits.disk, into its disk image, made at its size and
// mounted on the host for the copy. The start gives what it wrote to the
// sandbox's user.
func (d *Driver) Seed(ctx context.Context, ref driver.Ref, r io.Reader) error {
	o, unlock, err := d.unstarted(ctx, ref, "a snapshot's files")
	if err != nil {
		return err
	}
	defer unlock()
	dir := d.workdir(ref.ID)
	if size := o.Policy.Limits.DiskBytes; size > 0 {
		if o.ids() == nil {
			return errdefs.InvalidArgument("limits.disk needs a gateway that runs as root (a loop device for the sandbox's disk)")
		}
		img := filepath.Join(d.sandboxDir(ref.ID), "disk.ext4")
		if err := diskimage.Ensure(img, size, 0, 0); err != nil {
			return fmt.Errorf("native seed: the disk of /sandbox: %w", err)
		}
		mnt, release, err := d.mountDisk(ref.ID, img)
		if err != nil {
			return err
		}
		defer release()
		dir = mnt
	}
	_, err = safetar.UnpackDir(r, dir, safetar.Options{What: "the sandbox's /sandbox"})
	return err
}
