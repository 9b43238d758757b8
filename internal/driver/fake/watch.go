package fake

import (
	"context"
	"os"
	"path/filepath"
	"time"

	"github.com/corral-sandbox/corral/internal/driver"
)

var _ driver.Watcher = (*Driver)(nil)

// watchInterval is how often Watch looks at the objects file.
const watchInterval = 50 * time.Millisecond

// Watch implements driver.Watcher by polling the objects file: whoever
// changes an object (a test making a main process exit, say) is noticed.
func (d *Driver) Watch(ctx context.Context, changed func(id string)) error {
	path := filepath.Join(d.cfg.StateDir, ObjectsFile)
	var (
		lastMod time.Time
		last    = map[string]observed{}
	)
	tick := time.NewTicker(watchInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		fi, err := os.Stat(path)
		if err != nil || fi.ModTime().Equal(lastMod) {
			continue
		}
		lastMod = fi.ModTime()
		d.mu.Lock()
		objs, err := d.load()
		d.mu.Unlock()
		if err != nil {
			return err
		}
		now := map[string]observed{}
		for id, o := range objs {
			if !d.mine(o) {
				continue
			}
			now[id] = observed{o.Generation, o.State, o.ExitCode}
			if prev, ok := last[id]; !ok || prev != now[id] {
				changed(id)
			}
		}
		for id := range last {
			if _, ok := now[id]; !ok {
				changed(id)
			}
		}
		last = now
	}
}

// observed is what Watch compares between two looks at an object.
type observed struct {
	generation int64
	state      driver.State
	exitCode   int
}
