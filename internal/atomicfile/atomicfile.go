// Package atomicfile replaces files whole: readers, and a crash, see the old
// content or the new, never a part. It also makes a directory, or a whole
// file system, durable.
package atomicfile

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Write replaces path with data through a temporary file next to it,
// fsynced, then renamed over path.
func Write(path string, data []byte, mode os.FileMode) error {
	return WriteFrom(path, bytes.NewReader(data), mode)
}

// WriteFrom is Write of what r holds, copied in the kernel where r is a
// file (copy_file_range: no buffer in this process for the bytes).
func WriteFrom(path string, r io.Reader, mode os.FileMode) error {
	return writeFrom(path, r, mode, true)
}

// WriteVolatile is Write without the fsync: see WriteVolatileFrom.
func WriteVolatile(path string, data []byte, mode os.FileMode) error {
	return writeFrom(path, bytes.NewReader(data), mode, false)
}

// WriteVolatileFrom is WriteFrom without the fsync: readers see the old
// content or the new, but after a crash of the machine the file may be
// missing, empty or a part. It is for files that their reader checks and
// that can be made again.
func WriteVolatileFrom(path string, r io.Reader, mode os.FileMode) error {
	return writeFrom(path, r, mode, false)
}

func writeFrom(path string, r io.Reader, mode os.FileMode, sync bool) error {
	tmp, err := written(path, r, mode, sync)
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// Create writes path with data unless it exists (fs.ErrExist then, and
// path is left as it is): of writers that race to create it, one wins
// and the others read what it wrote, never a part. It fsyncs the file
// and its directory.
func Create(path string, data []byte, mode os.FileMode) error {
	tmp, err := written(path, bytes.NewReader(data), mode, true)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	if err := os.Link(tmp, path); err != nil {
		return err
	}
	return SyncDir(filepath.Dir(path))
}

// written writes what r holds to a temporary file of its own next to
// path (so that writers of one path at once never share one) and returns
// its name. The name starts with path's, then ".tmp": TempFiles finds
// those a crash left.
func written(path string, r io.Reader, mode os.FileMode, sync bool) (string, error) {
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return "", err
	}
	tmp := f.Name()
	err = f.Chmod(mode)
	if err == nil {
		_, err = io.Copy(f, r)
	}
	if err == nil && sync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return "", err
	}
	return tmp, nil
}

// TempFiles are the temporary files of the writes of path that a crash
// left.
func TempFiles(path string) []string {
	dir, prefix := filepath.Dir(path), filepath.Base(path)+".tmp"
	entries, _ := os.ReadDir(dir)
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix) {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	return out
}

// WriteDurable is Write, and an fsync of the directory, so that the rename
// itself survives a crash.
func WriteDurable(path string, data []byte, mode os.FileMode) error {
	return WriteDurableFrom(path, bytes.NewReader(data), mode)
}

// WriteDurableFrom is WriteFrom, and an fsync of the directory.
func WriteDurableFrom(path string, r io.Reader, mode os.FileMode) error {
	if err := WriteFrom(path, r, mode); err != nil {
		return err
	}
	return SyncDir(filepath.Dir(path))
}

// SyncDir makes the renames and removals in dir durable.
func SyncDir(dir string) error {
	return withDir(dir, func(d *os.File) error { return d.Sync() })
}

// SyncFS makes everything written to the file system that holds dir
// durable: one syncfs, not an fsync per file.
func SyncFS(dir string) error {
	return withDir(dir, func(d *os.File) error { return unix.Syncfs(int(d.Fd())) })
}

func withDir(dir string, f func(*os.File) error) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return f(d)
}
