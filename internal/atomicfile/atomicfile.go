// Package atomicfile replaces files whole: readers, and a crash, see the old
// content or the new, never a part. It also makes a directory, or a whole
// file system, durable.
package atomicfile

import (
	"bytes"
	"io"
	"os"
	"path/filepath"

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
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	if sync {
		if err := f.Sync(); err != nil {
			f.Close()
			return err
		}
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
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
