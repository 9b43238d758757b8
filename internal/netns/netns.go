// Package netns opens sockets inside another network namespace: the
// gateway serves a sandbox's egress proxy on the sandbox's own loopback
// (Listen), while the proxy's outgoing connections leave from the
// gateway's namespace, and it reaches a port on that loopback to forward
// it (Dial).
package netns

import (
	"fmt"
	"net"

	"golang.org/x/sys/unix"
)

// Listen listens on addr (TCP, "127.0.0.1:999") inside the network
// namespace at path (/proc/PID/ns/net). The socket stays in that namespace
// whatever thread later uses it. It needs CAP_SYS_ADMIN over the namespace
// and in the caller's own user namespace: a root gateway.
func Listen(path, addr string) (net.Listener, error) {
	var l net.Listener
	err := within(path, func() error {
		// A namespace a moment old has lo down, and no 127.0.0.1 yet.
		if err := LoopbackUp(); err != nil {
			return err
		}
		var err error
		l, err = net.Listen("tcp", addr)
		return err
	})
	if err != nil {
		if l != nil {
			l.Close()
		}
		return nil, fmt.Errorf("listen on %s in the network namespace %s: %w", addr, path, err)
	}
	return l, nil
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
