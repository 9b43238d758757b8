package docker

import (
	"context"

	"github.com/moby/moby/client"

	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/errdefs"
)

// Pause implements driver.Pauser with the engine's pause (its cgroup
// freezer; on the gVisor tier, runsc's pause).
func (d *Driver) Pause(ctx context.Context, ref driver.Ref) error {
	return d.freeze(ctx, ref, true)
}

// Resume implements driver.Pauser with the engine's unpause.
func (d *Driver) Resume(ctx context.Context, ref driver.Ref) error {
	return d.freeze(ctx, ref, false)
}

func (d *Driver) freeze(ctx context.Context, ref driver.Ref, frozen bool) error {
	list, err := d.containers(ctx, ref.ID)
	if err != nil {
		return err
	}
	if len(list) == 0 || generation(list[0].Labels) != ref.Generation || !running(list[0].State) {
		return errdefs.NotFound("sandbox %s generation %d does not run", ref.ID, ref.Generation)
	}
	c := list[0]
	switch st := stateOf(c.State); {
	case frozen && st == driver.StatePaused, !frozen && st == driver.StateRunning:
		return nil
	case frozen:
		_, err = d.api.ContainerPause(ctx, c.ID, client.ContainerPauseOptions{})
	default:
		_, err = d.api.ContainerUnpause(ctx, c.ID, client.ContainerUnpauseOptions{})
	}
	if err != nil {
		return d.wrap(err, "pause or unpause container "+c.Names[0])
	}
	return nil
}
