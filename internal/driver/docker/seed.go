package docker

import (
	"context"
	"io"

	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/safetar"
)

var _ driver.Seeder = (*Driver)(nil)

// Seed implements driver.Seeder: into the sandbox's volume, or its disk
// (limits.disk), which Create made and mounted on the host. The
// supervisor gives what it wrote to the sandbox's user when it starts.
func (d *Driver) Seed(ctx context.Context, ref driver.Ref, r io.Reader) error {
	obj, err := d.Inspect(ctx, ref.ID)
	if err != nil {
		return err
	}
	if obj.Generation != ref.Generation {
		return errdefs.NotFound("sandbox %s generation %d was not created (generation %d was)", ref.ID, ref.Generation, obj.Generation)
	}
	if obj.State != driver.StateCreated {
		return errdefs.FailedPrecondition("sandbox %s is %s: a snapshot's files are put in before it starts", ref.ID, obj.State)
	}
	dir, err := d.Workdir(ctx, ref.ID)
	if err != nil {
		return err
	}
	_, err = safetar.UnpackDir(r, dir, safetar.Options{What: "the sandbox's /sandbox"})
	return err
}
