package diskimage

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/testenv"
)

// A real image on a real loop device: a write past its size is ENOSPC,
// what was written survives a remount, it grows and refuses to shrink.
func TestImage(t *testing.T) {
	requireTools(t)
	dir := t.TempDir()
	img, mnt := filepath.Join(dir, "disk.ext4"), filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := Ensure(img, 16<<20, 1234, 1234); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(img); err != nil || fi.Size() != 16<<20 {
		t.Fatalf("image: %v, %v; want 16 MiB", fi, err)
	}
	mount := func() {
		t.Helper()
		if err := Mount(img, mnt); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = unix.Unmount(mnt, unix.MNT_DETACH) })
		if ok, err := Mounted(mnt); err != nil || !ok {
			t.Fatalf("mounted: %v, %v", ok, err)
		}
	}
	mount()
	var st unix.Stat_t
	if err := unix.Stat(mnt, &st); err != nil || st.Uid != 1234 || st.Gid != 1234 {
		t.Errorf("root of the image: uid %d gid %d (%v); want 1234", st.Uid, st.Gid, err)
	}
	if err := os.WriteFile(filepath.Join(mnt, "kept"), []byte("kept\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 32<<20)
	err := os.WriteFile(filepath.Join(mnt, "big"), big, 0o644)
	if err == nil || !strings.Contains(err.Error(), "no space left on device") {
		t.Errorf("32 MiB into a 16 MiB image: %v; want ENOSPC", err)
	}
	if err := unix.Unmount(mnt, 0); err != nil {
		t.Fatal(err)
	}
	if err := Ensure(img, 8<<20, 0, 0); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "cannot shrink") {
		t.Errorf("shrinking: %v; want it refused as an invalid argument", err)
	}
	if err := Ensure(img, 48<<20, 0, 0); err != nil {
		t.Fatalf("grow: %v", err)
	}
	mount()
	if data, err := os.ReadFile(filepath.Join(mnt, "kept")); err != nil || string(data) != "kept\n" {
		t.Errorf("after growing: %q, %v; want what was written", data, err)
	}
	if err := os.WriteFile(filepath.Join(mnt, "big"), big, 0o644); err != nil {
		t.Errorf("32 MiB into the grown 48 MiB image: %v", err)
	}
}

// An image still attached to a loop device (mounted, or mounted in a mount
// namespace not yet gone) is neither checked, grown nor mounted a second
// time: each would corrupt the file system in use.
func TestAttachedImageIsLeftAlone(t *testing.T) {
	requireTools(t)
	wait := detachWait
	defer func() { detachWait = wait }()
	detachWait = 200 * time.Millisecond // for the refusals: the image stays mounted
	dir := t.TempDir()
	img, mnt, second := filepath.Join(dir, "disk.ext4"), filepath.Join(dir, "mnt"), filepath.Join(dir, "second")
	for _, d := range []string{mnt, second} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := Ensure(img, 16<<20, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := Mount(img, mnt); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(mnt, unix.MNT_DETACH) })
	if err := Ensure(img, 32<<20, 0, 0); !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "/dev/loop") {
		t.Errorf("growing a mounted image: %v; want unavailable, naming its loop device", err)
	}
	if fi, err := os.Stat(img); err != nil || fi.Size() != 16<<20 {
		t.Errorf("the mounted image after a refused grow: %v, %v; want it untouched at 16 MiB", fi, err)
	}
	if err := Mount(img, second); !errors.Is(err, errdefs.ErrUnavailable) {
		_ = unix.Unmount(second, unix.MNT_DETACH)
		t.Errorf("a second mount of a mounted image: %v; want unavailable", err)
	}
	if err := unix.Unmount(mnt, 0); err != nil {
		t.Fatal(err)
	}
	// A mount namespace made meanwhile (another test's sandbox) may hold a
	// copy of the mount for a moment: the usual wait.
	detachWait = wait
	if err := Ensure(img, 32<<20, 0, 0); err != nil {
		t.Errorf("growing once unmounted: %v", err)
	}
}

// requireTools skips (fails under CORRAL_REQUIRE_ROOT=1) without root or
// e2fsprogs.
func requireTools(t *testing.T) {
	t.Helper()
	testenv.RequireRoot(t)
	if _, err := exec.LookPath("mkfs.ext4"); err != nil {
		if os.Getenv("CORRAL_REQUIRE_ROOT") == "1" {
			t.Fatalf("CORRAL_REQUIRE_ROOT=1 but mkfs.ext4 is missing (e2fsprogs): %v", err)
		}
		t.Skipf("needs mkfs.ext4 (e2fsprogs): %v", err)
	}
}
