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
// host id range when it has none and the gateway runs as root: the one the
// standby supervisor made its exec stage for, when it is free (so that the
// sandbox's start finds it ready), else the first free one.
func (d *Driver) saveNew(o *object) error {
	if o.IDBase != 0 || os.Geteuid() != 0 {
		return d.save(o)
	}
	d.idsMu.Lock()
	defer d.idsMu.Unlock() // until saved: the next choice sees this one
	used, err := d.usedRanges(o.ID)
	if err != nil {
		return err
	}
	d.standbyMu.Lock()
	ahead := d.standbyIDBase
	d.standbyMu.Unlock()
	if ahead != 0 && !used[ahead] {
		o.IDBase = ahead
		return d.save(o)
	}
	if o.IDBase, err = firstFree(used); err != nil {
		return err
	}
	return d.save(o)
}

// usedRanges returns the id ranges (by base) of the sandboxes other than
// id. The caller holds idsMu.
func (d *Driver) usedRanges(id string) (map[uint32]bool, error) {
	used := map[uint32]bool{}
	entries, err := os.ReadDir(filepath.Join(d.cfg.StateDir, "sandboxes"))
	if err != nil {
		return nil, fmt.Errorf("native driver: %w", err)
	}
	for _, e := range entries {
		if other, err := d.loadAny(e.Name()); err == nil && other.ID != id {
			used[other.IDBase] = true
		}
	}
	return used, nil
}

// firstFree returns the base of the first range not in used.
func firstFree(used map[uint32]bool) (uint32, error) {
	for n := uint32(0); n < idRanges; n++ {
		if base := idRangeFirst + n*idRangeSize; !used[base] {
			return base, nil
		}
	}
	return 0, fmt.Errorf("native driver: all %d host id ranges are taken", idRanges)
}

// nextRange is the id range a new sandbox would get now (nil for a
// gateway that is not root), for the standby to make its exec stage for.
func (d *Driver) nextRange() (*supervisor.IDRange, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	d.idsMu.Lock()
	defer d.idsMu.Unlock()
	used, err := d.usedRanges("")
	if err != nil {
		return nil, err
	}
	base, err := firstFree(used)
	if err != nil {
		return nil, err
	}
	return &supervisor.IDRange{Base: base, Size: idRangeSize}, nil
}

// ids is the host id range of a sandbox's processes, nil when they share
// the gateway's (a gateway that is not root).
func (o *object) ids() *supervisor.IDRange {
	if o.IDBase == 0 {
		return nil
	}
	return &supervisor.IDRange{Base: o.IDBase, Size: idRangeSize}
}
