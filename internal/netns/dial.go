package netns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"

	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/errdefs"

	"golang.org/x/sys/unix"
)

// Dial connects to addr (network "tcp", "127.0.0.1:8080") from inside the
// network namespace at path (/proc/PID/ns/net): the gateway reaches a
// sandbox's own loopback, whatever routes the sandbox has. The connection
// stays in that namespace whatever thread later uses it. It needs
// CAP_SYS_ADMIN over the namespace and in the caller's own user namespace:
// a root gateway; otherwise the error is os.ErrPermission.
func Dial(ctx context.Context, path, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := within(path, func() error {
		var d net.Dialer
		var err error
		c, err = d.DialContext(ctx, network, addr)
		return err
	})
	if err != nil {
		if c != nil { // dialled, but the thread could not go back
			c.Close()
		}
		return nil, fmt.Errorf("dial %s in the network namespace %s: %w", addr, path, err)
	}
	return c, nil
}

// within runs fn on an OS thread moved into the network namespace at path,
// and moves the thread back before anything else may run on it. A thread
// that cannot go back is never unlocked: it ends with its goroutine.
func within(path string, fn func() error) error {
	target, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("network namespace: %w", err)
	}
	defer target.Close()
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		own, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("network namespace: %w", err)
			return
		}
		defer own.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("enter the network namespace: %w", os.NewSyscallError("setns", err))
			return
		}
		ferr := fn()
		if err := unix.Setns(int(own.Fd()), unix.CLONE_NEWNET); err != nil {
			done <- fmt.Errorf("leave the network namespace: %w", err) // the thread stays locked
			return
		}
		runtime.UnlockOSThread()
		done <- ferr
	}()
	return <-done
}

// DialLoopback connects to 127.0.0.1:port inside the network namespace at
// path. Not being allowed to enter it is errdefs.ErrFailedPrecondition
// saying what the gateway lacks.
func DialLoopback(ctx context.Context, path string, port int) (net.Conn, error) {
	c, err := Dial(ctx, path, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if errors.Is(err, os.ErrPermission) {
		return nil, errdefs.FailedPrecondition("port %d: reaching it enters the sandbox's network namespace, "+
			"which needs a gateway running as root on the host of the sandboxes (%v)", port, err)
	}
	return c, err
}

// Reach is how a driver whose incarnations each have a network namespace
// on the gateway's host reaches into them: it implements driver.PortDialer
// and driver.EgressAttacher given NetNS, which finds the namespace of a
// running incarnation (/proc/PID/ns/net; errdefs.ErrNotFound when it does
// not run). A driver embeds it.
type Reach struct {
	NetNS func(ctx context.Context, ref driver.Ref) (string, error)
	// Egress is the gateway's egress proxy; nil when the driver's
	// sandboxes have none.
	Egress driver.Egress
}

// DialPort implements driver.PortDialer: it dials from inside the
// incarnation's network namespace.
func (r Reach) DialPort(ctx context.Context, ref driver.Ref, port int) (net.Conn, error) {
	path, err := r.NetNS(ctx, ref)
	if err != nil {
		return nil, err
	}
	return DialLoopback(ctx, path, port)
}

// AttachEgress implements driver.EgressAttacher: it serves the proxy
// inside the incarnation's network namespace.
func (r Reach) AttachEgress(ctx context.Context, ref driver.Ref) error {
	path, err := r.NetNS(ctx, ref)
	if err != nil || r.Egress == nil {
		return err
	}
	return r.Egress.Attach(ctx, ref, path)
}
