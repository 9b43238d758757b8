package testenv

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// UnmountUnder unmounts, when the test ends, what is still mounted under
// dir (a Docker driver's run directories of sandboxes a test did not
// delete), so that the directory can be removed.
func UnmountUnder(t testing.TB, dir string) {
	t.Cleanup(func() {
		f, err := os.Open("/proc/self/mountinfo")
		if err != nil {
			return
		}
		defer f.Close()
		prefix := filepath.Clean(dir) + "/"
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) > 4 && strings.HasPrefix(fields[4], prefix) {
				_ = unix.Unmount(fields[4], unix.MNT_DETACH)
			}
		}
	})
}
