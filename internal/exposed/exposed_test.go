package exposed_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/driver/fake"
	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/exposed"
	"github.com/corral-sandbox/corral/internal/lifecycle"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/store/sqlite"
	"github.com/corral-sandbox/corral/internal/testenv"
)

// ownLoopback is the fake driver with the test's own loopback as every
// running incarnation's: a port "inside" a sandbox is a port of the
// test's loopback. (The drivers' own DialPort is in their conformance
// runs.)
type ownLoopback struct {
	driver.Driver
	driver.Watcher
}

func (ownLoopback) DialPort(ctx context.Context, _ driver.Ref, port int) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
}

// gateway is a lifecycle with exposed ports, on a real store and the fake
// driver, which can be restarted as a new gateway over the same files.
type gateway struct {
	t       *testing.T
	dir     string
	dialing bool // the driver reaches ports (ownLoopback)
	st      *sqlite.Store
	m       *lifecycle.Manager
	ports   *exposed.Ports
}

func newGateway(t *testing.T, dialing bool) *gateway {
	g := &gateway{t: t, dir: t.TempDir(), dialing: dialing}
	g.start()
	t.Cleanup(g.stop)
	return g
}

func (g *gateway) start() {
	g.t.Helper()
	var err error
	if g.st, err = sqlite.Open(context.Background(), filepath.Join(g.dir, "corral.db")); err != nil {
		g.t.Fatal(err)
	}
	fd, err := fake.New(driver.Config{Label: "corral.test", StateDir: filepath.Join(g.dir, "fake")}, fake.Options{})
	if err != nil {
		g.t.Fatal(err)
	}
	var drv driver.Driver = fd
	if g.dialing {
		drv = ownLoopback{fd, fd}
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	g.ports = &exposed.Ports{Store: g.st, Log: log}
	g.m = lifecycle.New(lifecycle.Config{Store: g.st, Driver: drv, Instance: "test", Logger: log, Exposed: g.ports,
		RetryBase: 5 * time.Millisecond, RetryMax: 50 * time.Millisecond})
	g.ports.Core = g.m
	if err := g.m.Recover(context.Background()); err != nil {
		g.t.Fatal(err)
	}
	g.m.WatchDriver()
}

func (g *gateway) stop() {
	if g.m == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := g.m.Shutdown(ctx, time.Second); err != nil {
		g.t.Errorf("shutdown: %v", err)
	}
	g.st.Close()
	g.m = nil
}

func (g *gateway) restart() {
	g.stop()
	g.start()
}

// running creates a sandbox and waits until it is ready.
func (g *gateway) running(name string) {
	g.t.Helper()
	sb, _, err := g.m.Create(context.Background(), name, "", sandbox.Spec{Command: []string{"sleep", "1d"}})
	if err != nil {
		g.t.Fatal(err)
	}
	if _, err := g.m.Wait(context.Background(), sb.ID, lifecycle.GoalRunning, sb.Revision, nil); err != nil {
		g.t.Fatal(err)
	}
}

// serveHello answers every connection on a loopback port with its
// address, then closes it, and returns the port.
func serveHello(t *testing.T) int {
	t.Helper()
	return testenv.ServeLoopback(t, func(c net.Conn) { io.WriteString(c, "hello from "+c.LocalAddr().String()) })
}

// answer reads what a connection to addr is given before it ends.
func answer(addr string) (string, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	b, err := io.ReadAll(c)
	return string(b), err
}

func TestExposeLifecycle(t *testing.T) {
	h := newGateway(t, true)
	ctx := context.Background()
	port := serveHello(t)
	want := "hello from 127.0.0.1:" + strconv.Itoa(port)
	h.running("web")

	e, err := h.ports.Expose(ctx, "web", port, "")
	if err != nil {
		t.Fatal(err)
	}
	addr := e.Address
	if got, err := answer(addr); err != nil || got != want {
		t.Fatalf("through %s: %q, %v", addr, got, err)
	}
	if again, err := h.ports.Expose(ctx, "web", port, ""); err != nil || again.Address != addr {
		t.Fatalf("exposed again: %v, %v; want %s", again.Address, err, addr)
	}
	if _, err := h.ports.Expose(ctx, "web", port, "127.0.0.1:0"); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Fatalf("the same port elsewhere: %v, want already exists", err)
	}

	// stopped: each connection is reset; started: served again
	if sb, err := h.m.Stop(ctx, "web"); err != nil {
		t.Fatal(err)
	} else if _, err := h.m.Wait(ctx, "web", lifecycle.GoalStopped, sb.Revision, nil); err != nil {
		t.Fatal(err)
	}
	if got, err := answer(addr); got != "" || err == nil {
		t.Fatalf("a stopped sandbox's port gave %q, %v; want a reset", got, err)
	}
	if sb, err := h.m.Start(ctx, "web"); err != nil {
		t.Fatal(err)
	} else if _, err := h.m.Wait(ctx, "web", lifecycle.GoalRunning, sb.Revision, nil); err != nil {
		t.Fatal(err)
	}
	if got, err := answer(addr); err != nil || got != want {
		t.Fatalf("after start: %q, %v", got, err)
	}

	// a new gateway instance serves the recorded address once told to
	h.restart()
	list, err := h.ports.ExposedPorts(ctx, "")
	if err != nil || len(list) != 1 || list[0].Address != addr || list[0].SandboxName != "web" || list[0].Err == nil {
		t.Fatalf("before ServeExposed: %+v, %v", list, err)
	}
	// while another process holds the address, it is reported, and served
	// once free
	squatter, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.ports.Serve(ctx); err != nil {
		t.Fatal(err)
	}
	if list, _ := h.ports.ExposedPorts(ctx, "web"); len(list) != 1 || list[0].Err == nil || !strings.Contains(list[0].Err.Error(), "address already in use") {
		t.Fatalf("with the address taken: %+v", list)
	}
	squatter.Close()
	if err := h.ports.Serve(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := answer(addr); err != nil || got != want {
		t.Fatalf("after a restart: %q, %v", got, err)
	}
	if list, _ := h.ports.ExposedPorts(ctx, "web"); len(list) != 1 || list[0].Err != nil {
		t.Fatalf("after ServeExposed: %+v", list)
	}

	if _, err := h.ports.Unexpose(ctx, "web", port); err != nil {
		t.Fatal(err)
	}
	if _, err := net.Dial("tcp", addr); err == nil {
		t.Fatal("an unexposed address still accepts connections")
	}
	if _, err := h.ports.Unexpose(ctx, "web", port); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("unexposed twice: %v, want not found", err)
	}

	e, err = h.ports.Expose(ctx, "web", port, "")
	if err != nil {
		t.Fatal(err)
	}
	if sb, err := h.m.Delete(ctx, "web", false); err != nil {
		t.Fatal(err)
	} else if _, err := h.m.Wait(ctx, "web", lifecycle.GoalDeleted, sb.Revision, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := net.Dial("tcp", e.Address); err == nil {
		t.Fatal("a deleted sandbox's address still accepts connections")
	}
	if list, err := h.ports.ExposedPorts(ctx, ""); err != nil || len(list) != 0 {
		t.Fatalf("after delete: %+v, %v", list, err)
	}
}

// Bad requests are refused before anything listens, and a driver that
// cannot reach into sandboxes says so.
func TestExposeRefusals(t *testing.T) {
	h := newGateway(t, false)
	ctx := context.Background()
	h.running("web")
	for _, c := range []struct {
		name, address string
		port          int
		want          error
	}{
		{"web", "", 0, errdefs.ErrInvalidArgument},
		{"web", "", 70000, errdefs.ErrInvalidArgument},
		{"web", "no port", 8080, errdefs.ErrInvalidArgument},
		{"nonesuch", "", 8080, errdefs.ErrNotFound},
	} {
		if _, err := h.ports.Expose(ctx, c.name, c.port, c.address); !errors.Is(err, c.want) {
			t.Errorf("expose %s %d at %q: %v, want %v", c.name, c.port, c.address, err, c.want)
		}
	}
	if _, err := h.m.DialPort(ctx, "web", 8080); !errors.Is(err, errdefs.ErrNotImplemented) {
		t.Errorf("a port on the fake driver: %v, want not implemented", err)
	}
	if list, err := h.ports.ExposedPorts(ctx, ""); err != nil || len(list) != 0 {
		t.Errorf("after refusals: %+v, %v", list, err)
	}
}
