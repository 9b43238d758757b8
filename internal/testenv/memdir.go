package testenv

import (
	"os"
	"testing"
)

// MemDir is t.TempDir on a memory file system (/dev/shm) when the machine
// has one, so that fsync costs nothing: for tests whose files must outlive
// a process but not a power loss (the store's own tests and the torture
// harness keep theirs on disk). Without /dev/shm it is t.TempDir.
func MemDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("/dev/shm", "corral-test-")
	if err != nil {
		return t.TempDir()
	}
	t.Cleanup(func() {
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("remove %s: %v", dir, err)
		}
	})
	return dir
}
