package native

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/atomicfile"
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

// A range is reserved by a file of the state dir's ids/ directory, named
// by its first id and holding the sandbox's id, created exclusively: a
// create takes the next free range in a few system calls, however many
// sandboxes there are (it read every sandbox's object before), and two
// gateways sharing the state dir never take the same one. The reservations
// are made and removed with ids/lock held (flock), so a reservation whose
// sandbox is gone (a delete cut short between the two) can be taken over.
const idsDir = "ids"

// saveNew saves a new incarnation's object, first giving the sandbox its
// host id range when it has none and the gateway runs as root.
func (d *Driver) saveNew(o *object) error {
	if o.IDBase != 0 || os.Geteuid() != 0 {
		return d.save(o)
	}
	d.idsMu.Lock()
	defer d.idsMu.Unlock()
	unlock, err := d.lockIDs()
	if err != nil {
		return fmt.Errorf("native driver: %w", err)
	}
	defer unlock()
	if !d.idsIndexed {
		if err := d.reserveExisting(); err != nil {
			return fmt.Errorf("native driver: %w", err)
		}
		d.idsIndexed = true
	}
	for range idRanges {
		n := d.nextRange
		d.nextRange = (n + 1) % idRanges
		base := idRangeFirst + n*idRangeSize
		ok, err := d.reserve(base, o.ID)
		if err != nil {
			return fmt.Errorf("native driver: %w", err)
		}
		if !ok {
			continue
		}
		o.IDBase = base
		if err := d.save(o); err != nil {
			o.IDBase = 0
			return errors.Join(err, os.Remove(d.reservation(base)))
		}
		return nil
	}
	return fmt.Errorf("native driver: all %d host id ranges are taken", idRanges)
}

func (d *Driver) reservation(base uint32) string {
	return filepath.Join(d.cfg.StateDir, idsDir, strconv.FormatUint(uint64(base), 10))
}

// lockIDs takes ids/lock, and returns its release.
func (d *Driver) lockIDs() (func(), error) {
	if err := os.MkdirAll(filepath.Join(d.cfg.StateDir, idsDir), 0o700); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(d.cfg.StateDir, idsDir, "lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil // closing releases it
}

// reserve reserves the range at base for the sandbox id, reporting false
// when another sandbox has it. ids/lock is held.
func (d *Driver) reserve(base uint32, id string) (bool, error) {
	f, err := os.OpenFile(d.reservation(base), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		if d.holder(base) != "" {
			return false, nil
		}
		return true, atomicfile.Write(d.reservation(base), []byte(id), 0o600) // left by a delete cut short
	}
	if err != nil {
		return false, err
	}
	_, err = f.WriteString(id)
	return true, errors.Join(err, f.Close())
}

// reservedBy returns the sandbox the reservation of the range at base
// names, "" when there is none. ids/lock is held.
func (d *Driver) reservedBy(base uint32) string {
	data, err := os.ReadFile(d.reservation(base))
	if err != nil {
		return ""
	}
	return string(data)
}

// holder returns the sandbox whose object holds the range at base, or ""
// when the range's reservation names a sandbox that has another range or
// none. ids/lock is held.
func (d *Driver) holder(base uint32) string {
	id := d.reservedBy(base)
	if id == "" {
		return ""
	}
	if o, err := d.loadAny(id); err == nil && o.IDBase == base {
		return id
	}
	return ""
}

// reserveExisting reserves the ranges of the sandboxes there are (a state
// dir of a version that did not reserve them), once per driver. ids/lock
// is held.
func (d *Driver) reserveExisting() error {
	entries, err := os.ReadDir(filepath.Join(d.cfg.StateDir, "sandboxes"))
	if err != nil {
		return err
	}
	for _, e := range entries {
		o, err := d.loadAny(e.Name())
		if err != nil || o.IDBase == 0 || d.reservedBy(o.IDBase) == o.ID {
			continue
		}
		if err := atomicfile.Write(d.reservation(o.IDBase), []byte(o.ID), 0o600); err != nil {
			return err
		}
	}
	return nil
}

// release removes the reservation of a deleted sandbox's range.
func (d *Driver) release(id string, base uint32) error {
	if base == 0 {
		return nil
	}
	unlock, err := d.lockIDs()
	if err != nil {
		return err
	}
	defer unlock()
	if d.reservedBy(base) != id {
		return nil // none, or taken over already
	}
	return os.Remove(d.reservation(base))
}

// ids is the host id range of a sandbox's processes, nil when they share
// the gateway's (a gateway that is not root).
func (o *object) ids() *supervisor.IDRange {
	if o.IDBase == 0 {
		return nil
	}
	return &supervisor.IDRange{Base: o.IDBase, Size: idRangeSize}
}
