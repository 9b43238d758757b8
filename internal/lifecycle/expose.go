package lifecycle

import (
	"context"
	"errors"
	"net"
	"strconv"
	"time"

	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/tunnel"
)

// Exposed is an exposed port as a caller sees it.
type Exposed struct {
	sandbox.ExposedPort
	SandboxName string
	// Err says why this gateway does not serve the address now.
	Err error
}

// dialTimeout bounds reaching a sandbox's port for one connection to an
// exposed address.
const dialTimeout = 10 * time.Second

// Expose serves a sandbox's port on address of the gateway host ("":
// 127.0.0.1 and a free port), records it, and returns it with the port
// chosen. A port already exposed at that address (or when address is "")
// is returned as it is.
func (m *Manager) Expose(ctx context.Context, nameOrID string, port int, address string) (Exposed, error) {
	if err := validPort(port); err != nil {
		return Exposed{}, err
	}
	done, err := m.admit()
	if err != nil {
		return Exposed{}, err
	}
	defer done()
	m.exposeMu.Lock() // one expose or unexpose at a time: listen, then record
	defer m.exposeMu.Unlock()
	sb, err := m.Get(ctx, nameOrID)
	if err != nil {
		return Exposed{}, err
	}
	if sb.Desired == sandbox.DesiredDeleted {
		return Exposed{}, errdefs.FailedPrecondition("sandbox %q is being deleted", sb.Name)
	}
	recorded, err := m.cfg.Store.ListExposedPorts(ctx, sb.ID)
	if err != nil {
		return Exposed{}, err
	}
	for _, p := range recorded {
		if p.Port != port {
			continue
		}
		if address != "" && address != p.Address {
			return Exposed{}, errdefs.AlreadyExists("port %d of sandbox %q is already exposed at %s; unexpose it first", port, sb.Name, p.Address)
		}
		return m.describe(p, sb.Name), nil
	}
	if address == "" {
		address = "127.0.0.1:0"
	}
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return Exposed{}, errdefs.InvalidArgument("address %q: want HOST:PORT: %v", address, err)
	}
	l, err := net.Listen("tcp", address)
	if err != nil {
		return Exposed{}, errdefs.FailedPrecondition("expose port %d of sandbox %q: %v", port, sb.Name, err)
	}
	// the host as given (0.0.0.0 stays 0.0.0.0), with the port chosen
	chosen := net.JoinHostPort(host, strconv.Itoa(l.Addr().(*net.TCPAddr).Port))
	p := sandbox.ExposedPort{SandboxID: sb.ID, Port: port, Address: chosen, CreatedAt: m.now()}
	// served before it is recorded, so that a delete that removes the
	// record in between also closes the listener
	m.exposed.serve(m, p, l)
	if err := m.cfg.Store.AddExposedPort(ctx, p); err != nil {
		m.exposed.drop(p.SandboxID, p.Port)
		return Exposed{}, err
	}
	m.log.Info("port exposed", "sandbox", sb.Name, "port", port, "address", p.Address)
	return Exposed{ExposedPort: p, SandboxName: sb.Name}, nil
}

// Unexpose stops serving a sandbox's exposed port and removes its record.
func (m *Manager) Unexpose(ctx context.Context, nameOrID string, port int) (Exposed, error) {
	done, err := m.admit()
	if err != nil {
		return Exposed{}, err
	}
	defer done()
	m.exposeMu.Lock()
	defer m.exposeMu.Unlock()
	sb, err := m.Get(ctx, nameOrID)
	if err != nil {
		return Exposed{}, err
	}
	recorded, err := m.cfg.Store.ListExposedPorts(ctx, sb.ID)
	if err != nil {
		return Exposed{}, err
	}
	for _, p := range recorded {
		if p.Port == port {
			if err := m.cfg.Store.RemoveExposedPort(ctx, sb.ID, port); err != nil {
				return Exposed{}, err
			}
			m.exposed.drop(sb.ID, port)
			m.log.Info("port unexposed", "sandbox", sb.Name, "port", port, "address", p.Address)
			return Exposed{ExposedPort: p, SandboxName: sb.Name}, nil
		}
	}
	return Exposed{}, errdefs.NotFound("port %d of sandbox %q is not exposed", port, sb.Name)
}

// ExposedPorts returns the exposed ports of one sandbox, or of every
// sandbox when nameOrID is "".
func (m *Manager) ExposedPorts(ctx context.Context, nameOrID string) ([]Exposed, error) {
	id, names := "", map[string]string{}
	if nameOrID != "" {
		sb, err := m.Get(ctx, nameOrID)
		if err != nil {
			return nil, err
		}
		id, names[sb.ID] = sb.ID, sb.Name
	} else {
		list, err := m.List(ctx)
		if err != nil {
			return nil, err
		}
		for _, sb := range list {
			names[sb.ID] = sb.Name
		}
	}
	recorded, err := m.cfg.Store.ListExposedPorts(ctx, id)
	if err != nil {
		return nil, err
	}
	out := make([]Exposed, 0, len(recorded))
	for _, p := range recorded {
		out = append(out, m.describe(p, names[p.SandboxID]))
	}
	return out, nil
}

// describe is a recorded port with whether this gateway serves it.
func (m *Manager) describe(p sandbox.ExposedPort, name string) Exposed {
	e := Exposed{ExposedPort: p, SandboxName: name}
	if err := m.exposed.problem(p.SandboxID, p.Port); err != nil {
		e.Err = err
	}
	return e
}

// ServeExposed listens on the address of every recorded exposed port that
// this gateway does not serve yet. The gateway calls it once recovery is
// done, and again at every resync, so that an address another process
// held is served once it is free.
func (m *Manager) ServeExposed(ctx context.Context) error {
	m.exposeMu.Lock()
	defer m.exposeMu.Unlock()
	recorded, err := m.cfg.Store.ListExposedPorts(ctx, "")
	if err != nil {
		return err
	}
	for _, p := range recorded {
		if m.exposed.serving(p.SandboxID, p.Port) {
			continue
		}
		l, err := net.Listen("tcp", p.Address)
		if err != nil {
			m.exposed.failed(p, err)
			m.log.Error("cannot serve an exposed port again; retrying at the next resync", "sandbox", p.SandboxID, "port", p.Port, "address", p.Address, "err", err)
			continue
		}
		m.exposed.serve(m, p, l)
		m.log.Info("serving exposed port", "sandbox", p.SandboxID, "port", p.Port, "address", p.Address)
	}
	return nil
}

// forward carries one connection to an exposed address to the sandbox's
// port, looking the sandbox up afresh: each incarnation has a network
// namespace of its own. While the sandbox does not run, the connection is
// reset at once.
func (m *Manager) forward(c net.Conn, p sandbox.ExposedPort) {
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	inside, err := func() (net.Conn, error) {
		defer cancel()
		sb, err := m.cfg.Store.GetSandbox(ctx, p.SandboxID)
		if err != nil {
			return nil, err
		}
		return m.dialPort(ctx, sb, p.Port)
	}()
	if err != nil {
		m.log.Debug("exposed port refused a connection", "sandbox", p.SandboxID, "port", p.Port, "err", err)
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // a reset, as a closed port gives
		}
		return
	}
	defer inside.Close()
	if err := tunnel.Join(c.(*net.TCPConn), inside.(*net.TCPConn)); err != nil && !errors.Is(err, net.ErrClosed) {
		m.log.Debug("exposed port connection ended", "sandbox", p.SandboxID, "port", p.Port, "err", err)
	}
}
