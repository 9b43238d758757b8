package native

import (
	"fmt"
	"os/exec"

	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/policy"
)

// runsc returns the runsc binary of the gVisor tier, or why there is none.
func (d *Driver) runsc() (string, error) {
	path, err := exec.LookPath(d.opts.Runsc)
	if err != nil {
		return "", fmt.Errorf("the gVisor tier needs gVisor's runsc on the gateway's host (Debian's package runsc): %w", err)
	}
	return path, nil
}

// GVisor implements driver.GVisorer: the gVisor tier needs runsc.
func (d *Driver) GVisor() error {
	_, err := d.runsc()
	return err
}

// checkGVisor refuses a policy that asks for the gVisor tier where the
// host has no runsc, or asks of it what gVisor cannot do.
func (d *Driver) checkGVisor(p policy.Policy) error {
	if !p.GVisor() {
		return nil
	}
	if err := d.GVisor(); err != nil {
		return errdefs.InvalidArgument("isolation: gvisor: %v", err)
	}
	if p.Filesystem.Set && p.Landlock.Compatibility == policy.HardRequirement {
		return errdefs.InvalidArgument("isolation: gvisor with landlock compatibility hard_requirement: gVisor's kernel has no Landlock " +
			"(with best_effort the sandbox's mounts enforce the file lists instead: only the listed paths are there, read-only but for /tmp and /sandbox)")
	}
	return nil
}
