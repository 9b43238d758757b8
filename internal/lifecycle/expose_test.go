package lifecycle

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/sandbox"
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
	h := newHarness(t, func(c *Config) {
		c.Driver = ownLoopback{c.Driver, c.Driver.(driver.Watcher)}
	})
	ctx := context.Background()
	port := serveHello(t)
	want := "hello from 127.0.0.1:" + strconv.Itoa(port)
	h.create("web")
	h.waitPhase("web", sandbox.PhaseReady)

	e, err := h.m.Expose(ctx, "web", port, "")
	if err != nil {
		t.Fatal(err)
	}
	addr := e.Address
	if got, err := answer(addr); err != nil || got != want {
		t.Fatalf("through %s: %q, %v", addr, got, err)
	}
	if again, err := h.m.Expose(ctx, "web", port, ""); err != nil || again.Address != addr {
		t.Fatalf("exposed again: %v, %v; want %s", again.Address, err, addr)
	}
	if _, err := h.m.Expose(ctx, "web", port, "127.0.0.1:0"); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Fatalf("the same port elsewhere: %v, want already exists", err)
	}

	// stopped: each connection is reset; started: served again
	if _, err := h.m.Stop(ctx, "web"); err != nil {
		t.Fatal(err)
	}
	h.waitPhase("web", sandbox.PhaseStopped)
	if got, err := answer(addr); got != "" || err == nil {
		t.Fatalf("a stopped sandbox's port gave %q, %v; want a reset", got, err)
	}
	if _, err := h.m.Start(ctx, "web"); err != nil {
		t.Fatal(err)
	}
	h.waitPhase("web", sandbox.PhaseReady)
	if got, err := answer(addr); err != nil || got != want {
		t.Fatalf("after start: %q, %v", got, err)
	}

	// a new gateway instance serves the recorded address once told to
	h.restart()
	list, err := h.m.ExposedPorts(ctx, "")
	if err != nil || len(list) != 1 || list[0].Address != addr || list[0].SandboxName != "web" || list[0].Err == nil {
		t.Fatalf("before ServeExposed: %+v, %v", list, err)
	}
	// while another process holds the address, it is reported, and served
	// once free
	squatter, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.m.ServeExposed(ctx); err != nil {
		t.Fatal(err)
	}
	if list, _ := h.m.ExposedPorts(ctx, "web"); len(list) != 1 || list[0].Err == nil || !strings.Contains(list[0].Err.Error(), "address already in use") {
		t.Fatalf("with the address taken: %+v", list)
	}
	squatter.Close()
	if err := h.m.ServeExposed(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := answer(addr); err != nil || got != want {
		t.Fatalf("after a restart: %q, %v", got, err)
	}
	if list, _ := h.m.ExposedPorts(ctx, "web"); len(list) != 1 || list[0].Err != nil {
		t.Fatalf("after ServeExposed: %+v", list)
	}

	if _, err := h.m.Unexpose(ctx, "web", port); err != nil {
		t.Fatal(err)
	}
	if _, err := net.Dial("tcp", addr); err == nil {
		t.Fatal("an unexposed address still accepts connections")
	}
	if _, err := h.m.Unexpose(ctx, "web", port); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("unexposed twice: %v, want not found", err)
	}

	e, err = h.m.Expose(ctx, "web", port, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.m.Delete(ctx, "web", false); err != nil {
		t.Fatal(err)
	}
	h.waitGone("web")
	if _, err := net.Dial("tcp", e.Address); err == nil {
		t.Fatal("a deleted sandbox's address still accepts connections")
	}
	if list, err := h.m.ExposedPorts(ctx, ""); err != nil || len(list) != 0 {
		t.Fatalf("after delete: %+v, %v", list, err)
	}
}

// Bad requests are refused before anything listens, and a driver that
// cannot reach into sandboxes says so.
func TestExposeRefusals(t *testing.T) {
	h := newHarness(t, nil)
	ctx := context.Background()
	h.create("web")
	h.waitPhase("web", sandbox.PhaseReady)
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
		if _, err := h.m.Expose(ctx, c.name, c.port, c.address); !errors.Is(err, c.want) {
			t.Errorf("expose %s %d at %q: %v, want %v", c.name, c.port, c.address, err, c.want)
		}
	}
	if _, err := h.m.DialPort(ctx, "web", 8080); !errors.Is(err, errdefs.ErrNotImplemented) {
		t.Errorf("a port on the fake driver: %v, want not implemented", err)
	}
	if list, err := h.m.ExposedPorts(ctx, ""); err != nil || len(list) != 0 {
		t.Errorf("after refusals: %+v, %v", list, err)
	}
}
