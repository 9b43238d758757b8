package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"

	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

// DialPort connects to 127.0.0.1:port inside a ready sandbox's network
// namespace. It is not egress: the sandbox's network policy does not
// apply to connections into it.
func (m *Manager) DialPort(ctx context.Context, nameOrID string, port int) (net.Conn, error) {
	if err := validPort(port); err != nil {
		return nil, err
	}
	sb, err := m.Get(ctx, nameOrID)
	if err != nil {
		return nil, err
	}
	if sb, err = m.Awake(ctx, sb); err != nil {
		return nil, err
	}
	return m.dialPort(ctx, sb, port)
}

func validPort(port int) error {
	if port < 1 || port > 65535 {
		return errdefs.InvalidArgument("port %d: want 1 to 65535", port)
	}
	return nil
}

// dialPort connects to a port of the running incarnation of sb through
// the driver.
func (m *Manager) dialPort(ctx context.Context, sb *sandbox.Sandbox, port int) (net.Conn, error) {
	if sb.Phase != sandbox.PhaseReady {
		return nil, errdefs.FailedPrecondition("sandbox %q is %s, not ready: its ports are reached only while it runs", sb.Name, sb.Phase)
	}
	d, ok := m.cfg.Driver.(driver.PortDialer)
	if !ok {
		return nil, errdefs.NotImplemented("the %s driver cannot reach into a sandbox's network", m.cfg.Driver.Name())
	}
	c, err := d.DialPort(ctx, driver.Ref{ID: sb.ID, Generation: sb.Generation}, port)
	switch {
	case errors.Is(err, errdefs.ErrNotFound):
		return nil, errdefs.FailedPrecondition("sandbox %q does not run: %v", sb.Name, err)
	case errors.Is(err, syscall.ECONNREFUSED):
		return nil, errdefs.FailedPrecondition("nothing listens on 127.0.0.1:%d in sandbox %q", port, sb.Name)
	case errors.Is(err, errdefs.ErrFailedPrecondition):
		return nil, fmt.Errorf("sandbox %q: %w", sb.Name, err)
	case err != nil:
		return nil, errdefs.Unavailable("port %d of sandbox %q: %v", port, sb.Name, err)
	}
	return c, nil
}
