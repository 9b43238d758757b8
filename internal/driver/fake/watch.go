package fake

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/corral-sandbox/corral/internal/driver"
)

var _ driver.Watcher = (*Driver)(nil)

// watchInterval is how often Watch looks at the changes file.
const watchInterval = 50 * time.Millisecond

// Watch implements driver.Watcher by following the changes file: whoever
// changes an object (a test making a main process exit, say) appends its
// id there. The first look reports every object.
func (d *Driver) Watch(ctx context.Context, changed func(id string)) error {
	path := filepath.Join(d.cfg.StateDir, ChangesFile)
	offset, err := changesSize(path)
	if err != nil {
		return err
	}
	objs, err := d.readAll()
	if err != nil {
		return err
	}
	for id, o := range objs {
		if d.mine(o) {
			changed(id)
		}
	}
	tick := time.NewTicker(watchInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		ids, next, err := readChangesFile(path, offset)
		if err != nil {
			return err
		}
		offset = next
		for _, id := range ids {
			// another gateway's object is not this one's business; a
			// removed one is
			if o, err := d.read(id); err != nil || o == nil || d.mine(o) {
				changed(id)
			}
		}
	}
}

func changesSize(path string) (int64, error) {
	fi, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

// readChangesFile is readChanges of the changes file at path.
func readChangesFile(path string, offset int64) ([]string, int64, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, offset, nil
	}
	if err != nil {
		return nil, offset, err
	}
	defer f.Close()
	return readChanges(f, offset)
}

// readChanges returns the ids of the complete lines of a changes file from
// offset on, each once, and the offset after them.
func readChanges(f io.ReaderAt, offset int64) ([]string, int64, error) {
	data, err := io.ReadAll(io.NewSectionReader(f, offset, 1<<40))
	if err != nil {
		return nil, offset, err
	}
	end := strings.LastIndexByte(string(data), '\n') + 1 // a line being written waits
	seen := map[string]bool{}
	var ids []string
	for _, id := range strings.Split(string(data[:end]), "\n") {
		if id != "" && !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	return ids, offset + int64(end), nil
}
