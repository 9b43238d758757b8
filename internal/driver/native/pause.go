package native

import (
	"context"
	"os"

	"github.com/corral-sandbox/corral/internal/cgroups"
	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/driver/native/shim"
	"github.com/corral-sandbox/corral/internal/errdefs"
)

// Pause implements driver.Pauser: the cgroup freezer freezes every process
// of the sandbox's workload group (its main process and execs); the
// supervisor, in a group beside it, stays awake to answer a stop.
func (d *Driver) Pause(ctx context.Context, ref driver.Ref) error {
	return d.freeze(ctx, ref, true)
}

// Resume implements driver.Pauser: a pause with memory is restored, a
// frozen one thawed.
func (d *Driver) Resume(ctx context.Context, ref driver.Ref) error {
	unlock := d.lock(ref.ID)
	_, err := os.Stat(d.bundle(ref.ID, ref.Generation).Path(shim.PausedFile))
	unlock()
	if err == nil {
		return d.resumeMemory(ctx, ref)
	}
	return d.freeze(ctx, ref, false)
}

func (d *Driver) freeze(ctx context.Context, ref driver.Ref, frozen bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	defer d.lock(ref.ID)()
	if _, live, err := d.incarnation(ref); err != nil {
		return err
	} else if !live {
		return errdefs.NotFound("sandbox %s generation %d does not run", ref.ID, ref.Generation)
	}
	return cgroups.Freeze(workload(ref.ID), frozen)
}

// incarnation is the object of ref, when it is of ref's generation
// (errdefs.ErrNotFound otherwise), and whether its supervisor lives. The
// sandbox is locked.
func (d *Driver) incarnation(ref driver.Ref) (*object, bool, error) {
	o, err := d.load(ref.ID)
	if err != nil {
		return nil, false, err
	}
	if o.Generation != ref.Generation {
		return nil, false, errdefs.NotFound("sandbox %s has no generation %d (generation %d is its newest)", ref.ID, ref.Generation, o.Generation)
	}
	live, err := alive(d.bundle(ref.ID, ref.Generation))
	return o, live, err
}
