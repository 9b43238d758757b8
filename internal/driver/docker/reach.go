package docker

import (
	"context"
	"net"

	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/netns"
)

var (
	_ driver.EgressAttacher = (*Driver)(nil)
	_ driver.PortDialer     = (*Driver)(nil)
)

// AttachEgress implements driver.EgressAttacher.
func (d *Driver) AttachEgress(ctx context.Context, ref driver.Ref) error {
	path, err := d.netNS(ctx, ref)
	if err != nil || d.cfg.Egress == nil {
		return err
	}
	return d.cfg.Egress.Attach(ctx, ref, path)
}

// DialPort implements driver.PortDialer: it dials from inside the
// container's network namespace, which the gateway must see (the engine
// runs on the gateway's host).
func (d *Driver) DialPort(ctx context.Context, ref driver.Ref, port int) (net.Conn, error) {
	path, err := d.netNS(ctx, ref)
	if err != nil {
		return nil, err
	}
	return netns.DialLoopback(ctx, path, port)
}
