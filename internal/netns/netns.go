// Package netns opens listening sockets inside another network namespace:
// the gateway serves a sandbox's egress proxy on the sandbox's own
// loopback, while the proxy's outgoing connections leave from the
// gateway's namespace.
package netns

import (
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// Listen listens on addr (TCP, "127.0.0.1:999") inside the network
// namespace at path (/proc/PID/ns/net). The socket stays in that namespace
// whatever thread later uses it. It needs CAP_SYS_ADMIN over the namespace
// and in the caller's own user namespace: a root gateway.
func Listen(path, addr string) (net.Listener, error) {
	target, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("network namespace: %w", err)
	}
	defer target.Close()
	type result struct {
		l   net.Listener
		err error
	}
	done := make(chan result, 1)
	go func() {
		// A thread that cannot go back to the gateway's namespace is never
		// unlocked: it ends with this goroutine instead of serving others.
		runtime.LockOSThread()
		own, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			done <- result{nil, fmt.Errorf("network namespace: %w", err)}
			return
		}
		defer own.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			done <- result{nil, fmt.Errorf("enter the network namespace %s: %w", path, err)}
			return
		}
		// A namespace a moment old has lo down, and no 127.0.0.1 yet.
		lerr := LoopbackUp()
		var l net.Listener
		if lerr == nil {
			l, lerr = net.Listen("tcp", addr)
		}
		if err := unix.Setns(int(own.Fd()), unix.CLONE_NEWNET); err != nil {
			if l != nil {
				l.Close()
			}
			done <- result{nil, errors.Join(lerr, fmt.Errorf("leave the network namespace %s: %w", path, err))}
			return
		}
		runtime.UnlockOSThread()
		if lerr != nil {
			lerr = fmt.Errorf("listen on %s in the network namespace %s: %w", addr, path, lerr)
		}
		done <- result{l, lerr}
	}()
	r := <-done
	return r.l, r.err
}

// LoopbackUp brings up lo, the only interface of a new network namespace,
// in the calling thread's namespace (a second time is harmless).
func LoopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bring up loopback: %w", err)
	}
	return nil
}
