package docker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"
	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/diskimage"
	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/policy"
)

// A sandbox with limits.disk keeps /sandbox on a disk image of its own
// (internal/diskimage) instead of a volume: the gateway mounts it on the
// host, at disks/ID, and the container binds that. The mount outlives the
// gateway, as containers do; a start after a reboot mounts it again.

func (d *Driver) diskImage(id string) string {
	return filepath.Join(d.cfg.StateDir, "disks", id+".ext4")
}
func (d *Driver) diskMount(id string) string { return filepath.Join(d.cfg.StateDir, "disks", id) }

// workdirMount is the mount of /sandbox for an incarnation: the sandbox's
// disk, made, grown and mounted on the host as needed, when the policy
// sets limits.disk or the sandbox has one; else its volume. A disk is set
// when the sandbox is created: one added later would hide what its volume
// holds, and one is never taken away.
func (d *Driver) workdirMount(ctx context.Context, spec driver.Spec, pol policy.Policy) (mount.Mount, error) {
	img, mnt := d.diskImage(spec.ID), d.diskMount(spec.ID)
	owner := 0 // a user named by the image: the supervisor gives it /sandbox
	if uid := pol.Process.RunAsUser; uid != nil {
		owner = *uid
	}
	_, err := os.Stat(img)
	hasDisk := err == nil
	if size := pol.Limits.DiskBytes; size > 0 {
		if !hasDisk {
			_, err := d.api.VolumeInspect(ctx, d.volumeName(spec.ID), client.VolumeInspectOptions{})
			if err == nil {
				return mount.Mount{}, errdefs.InvalidArgument("limits.disk is set when a sandbox is created: /sandbox of %s is already a volume", spec.Name)
			}
			if !cerrdefs.IsNotFound(err) {
				return mount.Mount{}, d.wrap(err, "inspect volume "+d.volumeName(spec.ID))
			}
		}
		if err := d.mountDisk(img, mnt, size, owner); err != nil {
			return mount.Mount{}, err
		}
		hasDisk = true
	} else if hasDisk {
		if err := d.mountDisk(img, mnt, 0, owner); err != nil {
			return mount.Mount{}, err
		}
	}
	if hasDisk {
		return mount.Mount{Type: mount.TypeBind, Source: mnt, Target: workdir}, nil
	}
	// The volume is made here, not by the mount: Podman drops a mount's
	// volume labels. A create of a volume that exists returns it.
	name := d.volumeName(spec.ID)
	if _, err := d.api.VolumeCreate(ctx, client.VolumeCreateOptions{Name: name,
		Labels: map[string]string{d.cfg.Label: "true", driver.LabelGateway: d.cfg.Gateway, driver.LabelSandboxID: spec.ID}}); err != nil {
		return mount.Mount{}, d.wrap(err, "create volume "+name)
	}
	return mount.Mount{Type: mount.TypeVolume, Source: name, Target: workdir}, nil
}

// mountDisk makes (or grows, when size > 0) the disk image and mounts it
// on mnt unless it is mounted there; its root is given to uid.
func (d *Driver) mountDisk(img, mnt string, size int64, uid int) error {
	if err := os.MkdirAll(mnt, 0o700); err != nil {
		return fmt.Errorf("docker: the disk of /sandbox: %w", err)
	}
	mounted, err := diskimage.Mounted(mnt)
	if err != nil {
		return fmt.Errorf("docker: the disk of /sandbox: %w", err)
	}
	if size > 0 {
		if fi, err := os.Stat(img); mounted && err == nil && fi.Size() < size {
			// Grown while no container runs on it (a new incarnation).
			if err := unix.Unmount(mnt, 0); err != nil {
				return fmt.Errorf("docker: unmount the disk of /sandbox to grow it: %w", err)
			}
			mounted = false
		}
		if err := diskimage.Ensure(img, size, uid, uid); err != nil {
			return fmt.Errorf("docker: the disk of /sandbox: %w", err)
		}
	}
	if !mounted {
		if err := diskimage.Mount(img, mnt); err != nil {
			return fmt.Errorf("docker: the disk of /sandbox: %w", err)
		}
	}
	if err := os.Chown(mnt, uid, uid); err != nil {
		return fmt.Errorf("docker: the disk of /sandbox: %w", err)
	}
	return nil
}

// remountDisk mounts the sandbox's disk, if it has one, after a reboot.
func (d *Driver) remountDisk(id string) error {
	img, mnt := d.diskImage(id), d.diskMount(id)
	if _, err := os.Stat(img); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if mounted, err := diskimage.Mounted(mnt); err != nil || mounted {
		return err
	}
	if err := diskimage.Mount(img, mnt); err != nil {
		return fmt.Errorf("docker: the disk of /sandbox: %w", err)
	}
	return nil
}

// removeDisk unmounts and removes the sandbox's disk, if it has one; its
// loop device goes with the mount.
func (d *Driver) removeDisk(id string) error {
	mnt := d.diskMount(id)
	if err := unix.Unmount(mnt, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("docker: unmount the disk of /sandbox: %w", err)
	}
	for _, p := range []string{mnt, d.diskImage(id)} {
		if err := os.RemoveAll(p); err != nil {
			return fmt.Errorf("docker: remove the disk of /sandbox: %w", err)
		}
	}
	return nil
}

var _ driver.Workdirs = (*Driver)(nil)

// Workdir implements driver.Workdirs: the mount of the sandbox's disk on
// the host (limits.disk), which outlives its containers, or the volume's
// directory, which the engine keeps on this host.
func (d *Driver) Workdir(ctx context.Context, id string) (string, error) {
	if _, err := os.Stat(d.diskImage(id)); err == nil {
		mnt := d.diskMount(id)
		if mounted, err := diskimage.Mounted(mnt); err != nil || !mounted {
			return "", errdefs.FailedPrecondition("sandbox %s keeps /sandbox on its own disk (limits.disk), not mounted now: start it to reach its files", id)
		}
		return mnt, nil
	}
	vol, err := d.api.VolumeInspect(ctx, d.volumeName(id), client.VolumeInspectOptions{})
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return "", errdefs.NotFound("sandbox %s has no /sandbox volume", id)
		}
		return "", d.wrap(err, "inspect volume "+d.volumeName(id))
	}
	if vol.Volume.Mountpoint == "" {
		return "", errdefs.FailedPrecondition("the /sandbox volume of sandbox %s has no directory on this host", id)
	}
	return vol.Volume.Mountpoint, nil
}
