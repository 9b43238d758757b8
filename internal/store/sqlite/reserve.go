package sqlite

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	msqlite "modernc.org/sqlite"

	"github.com/corral-sandbox/corral/internal/errdefs"
)

// ReserveBytes is the space the store keeps beside its file, allocated and
// unused: when its disk is full, the store frees it and retries, so that
// the writes that end sandboxes (stops, deletes, their journal) commit
// while new sandboxes are refused.
const ReserveBytes = 8 << 20

// reserveRetry is how often, while the reserve is spent, a write tries to
// allocate it again (the disk may have been freed meanwhile).
const reserveRetry = 10 * time.Second

// reserve is the store's reserve of disk space: a file of ReserveBytes.
type reserve struct {
	path string

	mu    sync.Mutex
	spent bool      // freed for a write on a full disk, not allocated since
	tried time.Time // the last try to allocate it again
}

func newReserve(dbPath string) *reserve {
	r := &reserve{path: dbPath + ".reserve"}
	r.spent = r.allocate() != nil
	return r
}

// allocate makes the reserve file of ReserveBytes, or says why it cannot.
func (r *reserve) allocate() error {
	f, err := os.OpenFile(r.path, os.O_WRONLY|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	err = unix.Fallocate(int(f.Fd()), 0, 0, ReserveBytes)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(r.path) // a part of it would only take space
	}
	return err
}

// release frees the reserve for a write that failed on a full disk, and
// says whether there was one to free.
func (r *reserve) release() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.spent {
		return false
	}
	r.spent, r.tried = true, time.Now()
	return os.Remove(r.path) == nil
}

// lowSpace is the free space under which the disk counts as full for
// writes that add sandboxes: what may fit in SQLite's log still has to be
// written by the driver next to it.
const lowSpace = 1 << 20

// full says whether the disk is full: the reserve is spent and cannot be
// allocated again yet (it is tried every reserveRetry), or less than
// lowSpace is free.
func (r *reserve) full() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.spent && time.Since(r.tried) >= reserveRetry {
		r.tried = time.Now()
		r.spent = r.allocate() != nil
	}
	var fs unix.Statfs_t
	low := unix.Statfs(filepath.Dir(r.path), &fs) == nil && fs.Bavail*uint64(fs.Bsize) < lowSpace
	return r.spent || low
}

// diskFull says whether err is SQLite's "database or disk is full".
func diskFull(err error) bool {
	var se *msqlite.Error
	if errors.As(err, &se) {
		return se.Code()&0xff == 13 // SQLITE_FULL, and its extended codes
	}
	return err != nil && strings.Contains(err.Error(), "disk is full")
}

// fullDisk is the error of a write that the full disk refused: what the
// API and the log show.
func (r *reserve) fullDisk(err error) error {
	return errdefs.ResourceExhausted("the disk that holds the store (%s) is full: free space on it; deletes and stops still commit, on the store's reserve, but new sandboxes are refused until then (%v)",
		filepath.Dir(r.path), err)
}
