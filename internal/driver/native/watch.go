package native

import (
	"context"
	"time"

	"github.com/corral-sandbox/corral/internal/control"
	"github.com/corral-sandbox/corral/internal/driver"
)

// scanInterval is how often Watch looks for incarnations it does not
// watch yet (started by another call, or before a gateway restart).
const scanInterval = 500 * time.Millisecond

// Watch implements driver.Watcher. It holds a connection to every live
// supervisor (of a running or a paused sandbox), whose end tells at once
// that the supervisor is gone (its main process ended, or it was killed),
// and reports objects whose state changed between scans, and new ones
// that ended before a scan saw them.
func (d *Driver) Watch(ctx context.Context, changed func(id string)) error {
	type seen struct {
		gen   int64
		state driver.State
	}
	last := map[string]seen{}
	scanned := false              // a scan has been made: an object it did not see is new
	watching := map[string]bool{} // "id-generation"
	ended := make(chan string, 16)
	tick := time.NewTicker(scanInterval)
	defer tick.Stop()
	for {
		objs, err := d.List(ctx)
		if err != nil {
			return err
		}
		next := make(map[string]seen, len(objs))
		for _, o := range objs {
			now := seen{o.Generation, o.State}
			prev, seenBefore := last[o.ID]
			switch {
			case seenBefore && prev != now:
				changed(o.ID)
			case !seenBefore && scanned && (o.State == driver.StateStopped || o.State == driver.StateFailed):
				// ended before any scan saw it run (paused, then its
				// supervisor killed, within one interval): the gateway
				// last saw it running
				changed(o.ID)
			}
			next[o.ID] = now
			key := d.socket(o.ID, o.Generation)
			if (o.State == driver.StateRunning || o.State == driver.StatePaused) && !watching[key] {
				watching[key] = true
				go func(id, socket string) {
					waitEnd(ctx, socket)
					select {
					case ended <- socket:
					case <-ctx.Done():
					}
					changed(id)
				}(o.ID, key)
			}
		}
		last, scanned = next, true
		select {
		case <-ctx.Done():
			return ctx.Err()
		case socket := <-ended:
			delete(watching, socket)
		case <-tick.C:
		}
	}
}

// waitEnd returns when the supervisor on socket is gone or ctx ends.
func waitEnd(ctx context.Context, socket string) {
	c, err := control.Dial(socket)
	if err != nil {
		return
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	if c.Send(control.Request{Op: control.OpWait}) != nil {
		return
	}
	for {
		if _, err := c.Recv(); err != nil {
			return
		}
	}
}
