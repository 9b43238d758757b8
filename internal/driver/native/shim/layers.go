package shim

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/supervisor"
)

// mountLayers mounts an image's unpacked layers (bottom first) at dir as
// one read-only overlay, without setuid and device files. With ids, every
// layer is first idmapped into the sandbox's user namespace, so that a file
// the image gives uid N belongs to the sandbox's uid N (host id
// ids.Host(N)), and the shared layers themselves keep the image's ids.
func mountLayers(layers []string, ids *supervisor.IDRange, dir string) error {
	if len(layers) == 0 {
		return fmt.Errorf("an image without layers")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	lowers := slices.Clone(layers)
	if ids != nil {
		staged, err := idmapLayers(layers, *ids, dir+".layers")
		if err != nil {
			return err
		}
		lowers = staged
	}
	if len(lowers) == 1 {
		// An overlay needs two layers; an empty one below changes nothing.
		empty := dir + ".empty"
		if err := os.MkdirAll(empty, 0o755); err != nil {
			return err
		}
		lowers = append([]string{empty}, lowers...)
	}
	fs, err := unix.Fsopen("overlay", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return fmt.Errorf("overlay: %w", err)
	}
	defer unix.Close(fs)
	for _, l := range slices.Backward(lowers) { // the top layer first
		if err := unix.FsconfigSetString(fs, "lowerdir+", l); err != nil {
			return fmt.Errorf("overlay layer %s: %w", l, err)
		}
	}
	if err := unix.FsconfigCreate(fs); err != nil {
		return fmt.Errorf("overlay of %d layers: %w", len(lowers), err)
	}
	mnt, err := unix.Fsmount(fs, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
	if err != nil {
		return fmt.Errorf("overlay mount: %w", err)
	}
	defer unix.Close(mnt)
	if err := unix.MoveMount(mnt, "", unix.AT_FDCWD, dir, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("overlay at %s: %w", dir, err)
	}
	if ids != nil {
		// The overlay holds private copies of the staged mounts.
		for _, l := range lowers {
			_ = unix.Unmount(l, unix.MNT_DETACH) // the empty one is no mount
		}
	}
	return nil
}

// idmapLayers mounts each layer, idmapped to ids and read-only, under
// staging, and returns where.
func idmapLayers(layers []string, ids supervisor.IDRange, staging string) ([]string, error) {
	if err := ownProc(); err != nil { // the new namespace's id maps are written through it
		return nil, err
	}
	ns, err := supervisor.UserNamespace(ids)
	if err != nil {
		return nil, err
	}
	defer ns.Close()
	attr := unix.MountAttr{
		Attr_set:  unix.MOUNT_ATTR_IDMAP | unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV,
		Userns_fd: uint64(ns.Fd()),
	}
	staged := make([]string, len(layers))
	for i, l := range layers {
		staged[i] = filepath.Join(staging, strconv.Itoa(i))
		if err := os.MkdirAll(staged[i], 0o700); err != nil {
			return nil, err
		}
		tree, err := unix.OpenTree(unix.AT_FDCWD, l, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
		if err != nil {
			return nil, fmt.Errorf("layer %s: %w", l, err)
		}
		err = unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH, &attr)
		if err == nil {
			err = unix.MoveMount(tree, "", unix.AT_FDCWD, staged[i], unix.MOVE_MOUNT_F_EMPTY_PATH)
		}
		unix.Close(tree)
		if err != nil {
			return nil, fmt.Errorf("idmap layer %s to host ids %d…: %w", l, ids.Base, err)
		}
	}
	return staged, nil
}
