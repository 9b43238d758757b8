package fake

import (
	"errors"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// freeDir is the directory of the state dir that keeps the files of
// deleted objects, and the scratch files of changes, for reuse: a change
// writes a free file and exchanges it with the object's (renameat2
// RENAME_EXCHANGE), so steady calls neither allocate nor free an inode (on
// this VM's ext4 without a journal, each new inode's search for one not
// recently deleted took a fifth of a busy gateway's CPU). Free files are
// rewritten in place, which is why object files are read only with the
// objects locked: a reader never holds a file that is being rewritten.
const freeDir = "free"

// maxFree bounds the free files kept; a delete beyond it removes its file.
const maxFree = 256

// keepFree lists the free files a previous run left.
func (d *Driver) keepFree() error {
	entries, err := os.ReadDir(filepath.Join(d.cfg.StateDir, freeDir))
	if err != nil {
		return err
	}
	for _, e := range entries {
		path := filepath.Join(d.cfg.StateDir, freeDir, e.Name())
		if len(d.free) == maxFree {
			if err := os.Remove(path); err != nil {
				return err
			}
			continue
		}
		d.free = append(d.free, path)
	}
	return nil
}

// replace makes data the file of the object id, atomically: the name only
// ever points at a complete file, whenever the process dies. The objects
// are locked.
func (d *Driver) replace(id string, data []byte) error {
	scratch, err := d.scratch(id, data)
	if err != nil {
		return err
	}
	err = unix.Renameat2(unix.AT_FDCWD, scratch, unix.AT_FDCWD, d.objectPath(id), unix.RENAME_EXCHANGE)
	if !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EINVAL) {
		return err // exchanged: the object's old file is free now
	}
	// A new object (or a file system without exchange): the scratch file
	// takes the name and is free no more.
	if err := os.Rename(scratch, d.objectPath(id)); err != nil {
		return err
	}
	d.free = d.free[:len(d.free)-1]
	return nil
}

// scratch writes data into a free file, the last of d.free, and returns
// its path; with none, into a new one named after id.
func (d *Driver) scratch(id string, data []byte) (string, error) {
	for len(d.free) > 0 {
		path := d.free[len(d.free)-1]
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if errors.Is(err, os.ErrNotExist) { // taken by another process
			d.free = d.free[:len(d.free)-1]
			continue
		}
		if err != nil {
			return "", err
		}
		return path, write(f, data)
	}
	path := filepath.Join(d.cfg.StateDir, freeDir, id)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return "", err
	}
	d.free = append(d.free, path)
	return path, write(f, data)
}

// write makes data the whole of f, and closes it.
func write(f *os.File, data []byte) error {
	_, err := f.WriteAt(data, 0)
	if err == nil {
		err = f.Truncate(int64(len(data)))
	}
	return errors.Join(err, f.Close())
}

// remove removes the file of the object id, keeping it free while there
// are fewer than maxFree. The objects are locked.
func (d *Driver) remove(id string) error {
	if len(d.free) >= maxFree {
		return os.Remove(d.objectPath(id))
	}
	path := filepath.Join(d.cfg.StateDir, freeDir, id)
	if err := os.Rename(d.objectPath(id), path); err != nil {
		return err
	}
	d.free = append(d.free, path)
	return nil
}
