// Package diskimage gives a sandbox's /sandbox a size: an ext4 file system
// in a sparse file of the sandbox's own, attached to a loop device and
// mounted where /sandbox comes from. A write past its size fails with
// ENOSPC inside the sandbox, and nothing else on the host fills up.
// Formatting and growing use e2fsprogs (mkfs.ext4, e2fsck, resize2fs),
// the tools every distribution ships for ext4.
package diskimage

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/errdefs"
)

// MinSize is the smallest file system Ensure makes (policy.MinDiskBytes).
const MinSize = 8 << 20

// Ensure makes the image at path of size bytes, its root directory owned
// by uid and gid, unless it exists; an existing image smaller than size is
// grown (it must not be mounted then). Shrinking is refused, as an invalid
// argument (retrying will not mend it): it would lose what the sandbox wrote.
func Ensure(path string, size int64, uid, gid int) error {
	if size < MinSize {
		return fmt.Errorf("a disk of %d bytes is too small: at least %d MiB", size, MinSize>>20)
	}
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return create(path, size, uid, gid)
	case err != nil:
		return err
	case fi.Size() == size:
		return nil
	case fi.Size() > size:
		return errdefs.InvalidArgument("limits.disk: the disk is %d MiB and cannot shrink to %d MiB without losing what the sandbox wrote", fi.Size()>>20, size>>20)
	}
	// e2fsck and resize2fs on a file system mounted anywhere (a mount
	// namespace that copied it, not yet gone) would corrupt it.
	if err := waitDetached(path); err != nil {
		return err
	}
	if err := os.Truncate(path, size); err != nil {
		return err
	}
	// Exit status 1 is "errors corrected": a journal replayed, say.
	if err := run("e2fsck", "-f", "-p", path); err != nil && exitCode(err) != 1 {
		return err
	}
	return run("resize2fs", path)
}

func exitCode(err error) int {
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode()
	}
	return -1
}

func create(path string, size int64, uid, gid int) error {
	tmp := path + ".new"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	err = f.Truncate(size) // sparse: blocks are taken as they are written
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		// No blocks reserved for root: the sandbox gets the size it asked for.
		err = run("mkfs.ext4", "-q", "-F", "-m", "0", "-E", "root_owner="+strconv.Itoa(uid)+":"+strconv.Itoa(gid), tmp)
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Mount attaches the image at path to a free loop device and mounts it on
// dir (nosuid, nodev). The loop device is released when the mount goes.
func Mount(path, dir string) error {
	// Two loop devices on one image are two mounts of one ext4 writing
	// over each other: wait until a previous one (a stopped sandbox's
	// mount namespace still going away) is released.
	if err := waitDetached(path); err != nil {
		return err
	}
	loop, err := attach(path)
	if err != nil {
		return fmt.Errorf("attach %s: %w", path, err)
	}
	defer loop.Close() // from then on the mount holds it
	if err := unix.Mount(loop.Name(), dir, "ext4", unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		_ = unix.IoctlSetInt(int(loop.Fd()), unix.LOOP_CLR_FD, 0)
		return fmt.Errorf("mount %s on %s: %w", path, dir, err)
	}
	return nil
}

// attach binds the image to a free loop device and returns the device,
// open: it is released automatically once it is neither open nor mounted.
func attach(path string) (*os.File, error) {
	img, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	defer img.Close()
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	defer ctl.Close()
	for range 16 { // another attach may take the free device first
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return nil, fmt.Errorf("find a free loop device: %w", err)
		}
		loop, err := os.OpenFile("/dev/loop"+strconv.Itoa(n), os.O_RDWR, 0)
		if err != nil {
			return nil, err
		}
		cfg := unix.LoopConfig{Fd: uint32(img.Fd())}
		cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR
		copy(cfg.Info.File_name[:], filepath.Base(path))
		err = unix.IoctlLoopConfigure(int(loop.Fd()), &cfg)
		if err == nil {
			return loop, nil
		}
		loop.Close()
		if !errors.Is(err, unix.EBUSY) {
			return nil, fmt.Errorf("configure %s: %w", loop.Name(), err)
		}
	}
	return nil, errors.New("every free loop device was taken meanwhile")
}

// detachWait bounds how long waitDetached waits for a loop device to be
// released: a mount namespace's copy of the mount goes with its last
// process, within milliseconds of a sandbox's end.
var detachWait = 10 * time.Second

// waitDetached waits until no loop device is backed by the image at path,
// and says which one is after detachWait, as unavailable (a later retry
// may find it released).
func waitDetached(path string) error {
	deadline := time.Now().Add(detachWait)
	for delay := time.Millisecond; ; delay = min(2*delay, 100*time.Millisecond) {
		dev, err := loopOf(path)
		if err != nil || dev == "" {
			return err
		}
		if time.Now().After(deadline) {
			return errdefs.Unavailable("%s is still attached to /dev/%s after %v: is it mounted in a mount namespace that is still alive?", path, dev, detachWait)
		}
		time.Sleep(delay)
	}
}

// loopOf names the loop device backed by the file at path, or "".
func loopOf(path string) (string, error) {
	var img unix.Stat_t
	if err := unix.Stat(path, &img); err != nil {
		return "", err
	}
	backings, err := filepath.Glob("/sys/block/loop*/loop/backing_file")
	if err != nil {
		return "", err
	}
	for _, b := range backings {
		name, err := os.ReadFile(b)
		if err != nil {
			continue // detached meanwhile
		}
		var st unix.Stat_t
		if unix.Stat(strings.TrimSuffix(strings.TrimSpace(string(name)), " (deleted)"), &st) == nil && st.Dev == img.Dev && st.Ino == img.Ino {
			return filepath.Base(filepath.Dir(filepath.Dir(b))), nil
		}
	}
	return "", nil
}

// Mounted reports whether dir is a mount point (of anything).
func Mounted(dir string) (bool, error) {
	var st, parent unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return false, err
	}
	if err := unix.Lstat(filepath.Dir(dir), &parent); err != nil {
		return false, err
	}
	return st.Dev != parent.Dev, nil
}
