package lifecycle

import (
	"context"
	"io"
	"time"

	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

// Exec runs a command in a ready sandbox and returns its exit code.
func (m *Manager) Exec(ctx context.Context, nameOrID string, opts driver.ExecOptions) (int, error) {
	if len(opts.Command) == 0 {
		return 0, errdefs.InvalidArgument("no command to exec: give one after --")
	}
	if err := ValidateCommand(nameOrID, "exec command", opts.Command); err != nil {
		return 0, err
	}
	sb, err := m.Get(ctx, nameOrID)
	if err != nil {
		return 0, err
	}
	if sb, err = m.Awake(ctx, sb); err != nil {
		return 0, err
	}
	if sb.Phase != sandbox.PhaseReady {
		return 0, errdefs.FailedPrecondition("sandbox %q is %s, not ready: exec needs a running sandbox", sb.Name, sb.Phase)
	}
	x, ok := m.cfg.Driver.(driver.Execer)
	if !ok {
		return 0, errdefs.NotImplemented("the %s driver cannot exec into sandboxes", m.cfg.Driver.Name())
	}
	return x.Exec(ctx, sb.ID, opts)
}

// protectionsTimeout bounds the driver call behind a sandbox's protections.
const protectionsTimeout = 2 * time.Second

// Protections returns what the driver reports of the policy protecting a
// ready sandbox's main process, or nothing.
func (m *Manager) Protections(ctx context.Context, sb *sandbox.Sandbox) string {
	if sb.Phase != sandbox.PhaseReady {
		return ""
	}
	ictx, cancel := context.WithTimeout(ctx, protectionsTimeout) // get must not wait on a hung driver
	defer cancel()
	obj, err := m.cfg.Driver.Inspect(ictx, sb.ID)
	if err != nil || obj.Generation != sb.Generation {
		return ""
	}
	return obj.Protections
}

// Logs copies what a sandbox's main process printed.
func (m *Manager) Logs(ctx context.Context, nameOrID string, opts driver.LogOptions, stdout, stderr io.Writer) error {
	sb, err := m.Get(ctx, nameOrID)
	if err != nil {
		return err
	}
	lr, ok := m.cfg.Driver.(driver.LogReader)
	if !ok {
		return errdefs.NotImplemented("the %s driver keeps no logs", m.cfg.Driver.Name())
	}
	return lr.Logs(ctx, sb.ID, opts, stdout, stderr)
}
