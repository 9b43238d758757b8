package native

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/corral-sandbox/corral/internal/supervisor"
)

// Every sandbox of a gateway that runs as root gets a range of idRangeSize
// host user and group ids of its own, the n-th free one from idRangeFirst
// on: uid 0 inside is idRangeFirst+n*idRangeSize outside, never the host's
// root, and no two sandboxes share an id. The ranges start far above the
// ids of the host's users and the subordinate ranges of /etc/subuid.
const (
	idRangeFirst = 1 << 30
	idRangeSize  = 1 << 16
	idRanges     = (1<<32-idRangeFirst)/idRangeSize - 1
)

// saveNew saves a new incarnation's object, first giving the sandbox its
// host id range when it has none and the gateway runs as root.
func (d *Driver) saveNew(o *object) error {
	if o.IDBase != 0 || os.Geteuid() != 0 {
		return d.save(o)
	}
	d.idsMu.Lock()
	defer d.idsMu.Unlock() // until saved: the next choice sees this one
	used := map[uint32]bool{}
	entries, err := os.ReadDir(filepath.Join(d.cfg.StateDir, "sandboxes"))
	if err != nil {
		return fmt.Errorf("native driver: %w", err)
	}
	for _, e := range entries {
		if other, err := d.loadAny(e.Name()); err == nil && other.ID != o.ID {
			used[other.IDBase] = true
		}
	}
	for n := uint32(0); n < idRanges; n++ {
		if base := idRangeFirst + n*idRangeSize; !used[base] {
			o.IDBase = base
			return d.save(o)
		}
	}
	return fmt.Errorf("native driver: all %d host id ranges are taken", idRanges)
}

// ids is the host id range of a sandbox's processes, nil when they share
// the gateway's (a gateway that is not root).
func (o *object) ids() *supervisor.IDRange {
	if o.IDBase == 0 {
		return nil
	}
	return &supervisor.IDRange{Base: o.IDBase, Size: idRangeSize}
}
