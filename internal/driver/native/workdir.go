package native

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/diskimage"
	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/errdefs"
)

var _ driver.WorkdirOpener = (*Driver)(nil)

// OpenWorkdir implements driver.WorkdirOpener: the workdir directory; or,
// for a sandbox with a limits.disk image, its /sandbox as the live
// supervisor's mount namespace has it (the disk, mounted only there), or,
// while none lives, the image mounted on the host for the call.
func (d *Driver) OpenWorkdir(ctx context.Context, id string) (*os.Root, func(), error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	unlock := d.lock(id)
	defer unlock()
	o, err := d.load(id)
	if err != nil {
		return nil, nil, err
	}
	img := filepath.Join(d.sandboxDir(id), "disk.ext4")
	if _, err := os.Stat(img); err != nil {
		root, err := os.OpenRoot(d.workdir(id))
		return root, func() {}, err
	}
	b := d.bundle(id, o.Generation)
	live, err := alive(b)
	if err != nil {
		return nil, nil, err
	}
	if live {
		if o.Policy.GVisor() {
			return nil, nil, errdefs.FailedPrecondition("sandbox %s runs on gVisor with its own disk (limits.disk): stop it to reach its files", id)
		}
		pid, err := readPID(b)
		if err != nil {
			return nil, nil, fmt.Errorf("native: the supervisor's pid: %w", err)
		}
		root, err := openInRoot(fmt.Sprintf("/proc/%d/root", pid), "sandbox")
		return root, func() {}, err
	}
	mnt, release, err := d.mountDisk(id, img)
	if err != nil {
		return nil, nil, err
	}
	root, err := os.OpenRoot(mnt)
	if err != nil {
		release()
		return nil, nil, err
	}
	return root, release, nil
}

// mountDisk mounts a sandbox's disk image img on a directory of its own,
// for the gateway to reach its files while no supervisor lives, and
// returns the directory and what unmounts and removes it.
func (d *Driver) mountDisk(id, img string) (string, func(), error) {
	mnt, err := os.MkdirTemp(d.sandboxDir(id), "disk-")
	if err != nil {
		return "", nil, err
	}
	if err := diskimage.Mount(img, mnt); err != nil {
		os.Remove(mnt)
		return "", nil, fmt.Errorf("native: the disk of /sandbox: %w", err)
	}
	return mnt, func() {
		_ = unix.Unmount(mnt, 0)
		_ = os.Remove(mnt)
	}, nil
}

// openInRoot opens name in the directory dir (a process's root, which the
// sandbox's processes may change) as an os.Root, resolving name as if dir
// were "/": no link or ".." reaches outside it, and none is followed.
func openInRoot(dir, name string) (*os.Root, error) {
	top, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", dir, err)
	}
	defer unix.Close(top)
	fd, err := unix.Openat2(top, name, &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS})
	if err != nil {
		return nil, fmt.Errorf("open /%s of the sandbox: %w", name, err)
	}
	defer unix.Close(fd)
	return os.OpenRoot(fmt.Sprintf("/proc/self/fd/%d", fd))
}
