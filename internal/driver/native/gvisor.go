package native

import (
	"context"
	"fmt"
	"os/exec"

	"github.com/corral-sandbox/corral/internal/driver"
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

// Tiers implements driver.Tierer: the gVisor tier needs runsc.
func (d *Driver) Tiers(context.Context) []driver.Tier {
	tiers := []driver.Tier{{Name: policy.IsolationNamespaces, Available: true, Detail: "supervisors in new namespaces, on the host's kernel"}}
	runsc, err := d.runsc()
	if err != nil {
		return append(tiers, driver.Tier{Name: policy.IsolationGVisor, Detail: err.Error()})
	}
	return append(tiers, driver.Tier{Name: policy.IsolationGVisor, Available: true,
		Detail: runsc + "; network: the host's stack in the sandbox's loopback-only namespace, or gVisor's own with lifecycle.memory_snapshots (snapshot --memory)"})
}

// checkGVisor refuses a policy that asks for the gVisor tier where the
// host has no runsc, or asks of it what gVisor cannot do.
func (d *Driver) checkGVisor(p policy.Policy) error {
	if !p.GVisor() {
		return nil
	}
	if _, err := d.runsc(); err != nil {
		return errdefs.InvalidArgument("isolation: gvisor: %v", err)
	}
	if p.Filesystem.Set && p.Landlock.Compatibility == policy.HardRequirement {
		return errdefs.InvalidArgument("isolation: gvisor with landlock compatibility hard_requirement: gVisor's kernel has no Landlock " +
			"(with best_effort the sandbox's mounts enforce the file lists instead: only the listed paths are there, read-only but for /tmp and /sandbox)")
	}
	return nil
}
