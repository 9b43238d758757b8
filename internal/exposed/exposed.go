// Package exposed serves sandboxes' exposed ports: an address of the
// gateway host whose every connection is carried to a port inside a
// sandbox (through the core's DialPort, so the driver decides how), with
// the addresses recorded in the store and served again by a gateway that
// starts. The core tells it when a sandbox's record goes (Forget) and when
// the gateway shuts down (Close).
package exposed

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/tunnel"
)

// Core is what exposed ports need of the lifecycle (*lifecycle.Manager).
type Core interface {
	Get(ctx context.Context, nameOrID string) (*sandbox.Sandbox, error)
	List(ctx context.Context) ([]*sandbox.Sandbox, error)
	DialPort(ctx context.Context, nameOrID string, port int) (net.Conn, error)
}

// Store keeps the exposed ports' records (store.Store does).
type Store interface {
	AddExposedPort(ctx context.Context, p sandbox.ExposedPort) error
	ListExposedPorts(ctx context.Context, sandboxID string) ([]sandbox.ExposedPort, error)
	RemoveExposedPort(ctx context.Context, sandboxID string, port int) error
}

// Ports are the exposed ports of one gateway. Core, Store and Log are set
// before use (the core is made with Ports as its lifecycle.Exposer, then
// given to it).
type Ports struct {
	Core  Core
	Store Store
	Log   *slog.Logger

	mu sync.Mutex // one Expose, Unexpose or Serve at a time: listen, then record
	x  exposer
}

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
func (m *Ports) Expose(ctx context.Context, nameOrID string, port int, address string) (Exposed, error) {
	if port < 1 || port > 65535 {
		return Exposed{}, errdefs.InvalidArgument("port %d: want 1 to 65535", port)
	}
	sb, unlock, err := m.change(ctx, nameOrID)
	if err != nil {
		return Exposed{}, err
	}
	defer unlock()
	if sb.Desired == sandbox.DesiredDeleted {
		return Exposed{}, errdefs.FailedPrecondition("sandbox %q is being deleted", sb.Name)
	}
	recorded, err := m.Store.ListExposedPorts(ctx, sb.ID)
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
	p := sandbox.ExposedPort{SandboxID: sb.ID, Port: port, Address: chosen, CreatedAt: time.Now().UTC()}
	// served before it is recorded, so that a delete that removes the
	// record in between also closes the listener
	m.x.serve(m, p, l)
	if err := m.Store.AddExposedPort(ctx, p); err != nil {
		m.x.drop(p.SandboxID, p.Port)
		return Exposed{}, err
	}
	m.Log.Info("port exposed", "sandbox", sb.Name, "port", port, "address", p.Address)
	return Exposed{ExposedPort: p, SandboxName: sb.Name}, nil
}

// change begins a change of sandbox nameOrID's exposed ports (one at a
// time: listen, then record): it returns the sandbox and the unlock.
func (m *Ports) change(ctx context.Context, nameOrID string) (*sandbox.Sandbox, func(), error) {
	m.mu.Lock()
	if m.x.isClosed() {
		m.mu.Unlock()
		return nil, nil, errShuttingDown
	}
	sb, err := m.Core.Get(ctx, nameOrID)
	if err != nil {
		m.mu.Unlock()
		return nil, nil, err
	}
	return sb, m.mu.Unlock, nil
}

// Unexpose stops serving a sandbox's exposed port and removes its record.
func (m *Ports) Unexpose(ctx context.Context, nameOrID string, port int) (Exposed, error) {
	sb, unlock, err := m.change(ctx, nameOrID)
	if err != nil {
		return Exposed{}, err
	}
	defer unlock()
	recorded, err := m.Store.ListExposedPorts(ctx, sb.ID)
	if err != nil {
		return Exposed{}, err
	}
	for _, p := range recorded {
		if p.Port == port {
			if err := m.Store.RemoveExposedPort(ctx, sb.ID, port); err != nil {
				return Exposed{}, err
			}
			m.x.drop(sb.ID, port)
			m.Log.Info("port unexposed", "sandbox", sb.Name, "port", port, "address", p.Address)
			return Exposed{ExposedPort: p, SandboxName: sb.Name}, nil
		}
	}
	return Exposed{}, errdefs.NotFound("port %d of sandbox %q is not exposed", port, sb.Name)
}

// ExposedPorts returns the exposed ports of one sandbox, or of every
// sandbox the caller sees (its tenant's) when nameOrID is "".
func (m *Ports) ExposedPorts(ctx context.Context, nameOrID string) ([]Exposed, error) {
	id, names := "", map[string]string{}
	if nameOrID != "" {
		sb, err := m.Core.Get(ctx, nameOrID)
		if err != nil {
			return nil, err
		}
		id, names[sb.ID] = sb.ID, sb.Name
	} else {
		list, err := m.Core.List(ctx)
		if err != nil {
			return nil, err
		}
		for _, sb := range list {
			names[sb.ID] = sb.Name
		}
	}
	recorded, err := m.Store.ListExposedPorts(ctx, id)
	if err != nil {
		return nil, err
	}
	out := make([]Exposed, 0, len(recorded))
	for _, p := range recorded {
		if name, ok := names[p.SandboxID]; ok {
			out = append(out, m.describe(p, name))
		}
	}
	return out, nil
}

// describe is a recorded port with whether this gateway serves it.
func (m *Ports) describe(p sandbox.ExposedPort, name string) Exposed {
	e := Exposed{ExposedPort: p, SandboxName: name}
	if err := m.x.problem(p.SandboxID, p.Port); err != nil {
		e.Err = err
	}
	return e
}

// Serve listens on the address of every recorded exposed port that this
// gateway does not serve yet. The gateway calls it once recovery is done,
// and again at every resync, so that an address another process held is
// served once it is free.
func (m *Ports) Serve(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	recorded, err := m.Store.ListExposedPorts(ctx, "")
	if err != nil {
		return err
	}
	for _, p := range recorded {
		if m.x.serving(p.SandboxID, p.Port) {
			continue
		}
		l, err := net.Listen("tcp", p.Address)
		if err != nil {
			m.x.failed(p, err)
			m.Log.Error("cannot serve an exposed port again; retrying at the next resync", "sandbox", p.SandboxID, "port", p.Port, "address", p.Address, "err", err)
			continue
		}
		m.x.serve(m, p, l)
		m.Log.Info("serving exposed port", "sandbox", p.SandboxID, "port", p.Port, "address", p.Address)
	}
	return nil
}

// forward carries one connection to an exposed address to the sandbox's
// port, reached afresh: each incarnation has a network of its own. While
// the sandbox does not run, the connection is reset at once.
func (m *Ports) forward(c net.Conn, p sandbox.ExposedPort) {
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	inside, err := m.Core.DialPort(ctx, p.SandboxID, p.Port)
	cancel()
	if err != nil {
		m.Log.Debug("exposed port refused a connection", "sandbox", p.SandboxID, "port", p.Port, "err", err)
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // a reset, as a closed port gives
		}
		return
	}
	defer inside.Close()
	side, ok := inside.(tunnel.Side)
	if !ok {
		m.Log.Error("exposed port: a connection to a sandbox's port cannot half-close", "sandbox", p.SandboxID, "type", fmt.Sprintf("%T", inside))
		return
	}
	if err := tunnel.Join(c.(*net.TCPConn), side); err != nil && !errors.Is(err, net.ErrClosed) {
		m.Log.Debug("exposed port connection ended", "sandbox", p.SandboxID, "port", p.Port, "err", err)
	}
}

// errShuttingDown refuses what comes after Close.
var errShuttingDown = errdefs.Unavailable("the gateway is shutting down; retry when it is back")

// Forget stops serving every exposed port of sandbox id, whose record is
// going (the records of its ports go with it).
func (m *Ports) Forget(id string) { m.x.drop(id, 0) }

// Close stops serving every port and waits for the accept loops and the
// connections to end; what comes after is refused.
func (m *Ports) Close() { m.x.closeAll() }
