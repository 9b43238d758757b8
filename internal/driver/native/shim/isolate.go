package shim

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/diskimage"
	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/policy"
	"github.com/corral-sandbox/corral/internal/supervisor"
)

// These run inside the new namespaces the native driver starts a
// supervisor in, before the main process starts.

// setHostname names the sandbox in its own UTS namespace.
func setHostname(name string) error {
	if err := unix.Sethostname([]byte(name)); err != nil {
		return fmt.Errorf("set hostname %q: %w", name, err)
	}
	return nil
}

// provided are the top-level directories the sandbox gets fresh, whatever
// its source root holds.
var provided = map[string]bool{"proc": true, "sys": true, "dev": true, "tmp": true, "sandbox": true, ".corral": true}

// devices are the host device nodes bound into the sandbox's /dev.
var devices = []string{"null", "zero", "full", "random", "urandom", "tty"}

// procReadOnly are the parts of /proc a sandbox may read but not write;
// procMasked are those it may not even read (they leak the host's state).
var (
	procReadOnly = []string{"sys", "sysrq-trigger", "irq", "bus", "fs"}
	procMasked   = []string{"kcore", "keys", "timer_list", "timer_stats", "sched_debug", "latency_stats", "asound", "acpi", "scsi"}
)

// sysMasked are the parts of /sys a sandbox may not read, as container
// runtimes mask them: firmware tables and power measurements (which leak
// what other tenants compute).
var sysMasked = []string{"firmware", "devices/virtual/powercap"}

// HostOSDirs are the top-level directories of the host's root that a
// sandbox on the host's operating system (no image) sees, read-only:
// programs and libraries, and /etc without its secrets (etcMasked).
// Nothing else of the host is there: no /run and its sockets, /var, /home,
// /root, /srv, /mnt, /opt, no users' files.
var HostOSDirs = []string{"bin", "sbin", "lib", "lib32", "lib64", "libx32", "usr", "etc"}

// etcMasked are the files (patterns) under /etc that a sandbox on the
// host's operating system must not read: password hashes, sudo rules,
// SSH host keys, private TLS keys.
var etcMasked = []string{
	"shadow", "shadow-", "gshadow", "gshadow-", "security/opasswd",
	"sudoers", "sudoers.d", "ssh/ssh_host_*", "ssl/private",
}

// enterRoot builds the sandbox's root file system on newRoot and pivots the
// mount namespace into it.
func enterRoot(cfg SandboxConfig, newRoot string) error {
	if err := buildRoot(cfg, newRoot); err != nil {
		return err
	}
	return pivot(newRoot)
}

// ownProc makes the supervisor's mounts private and mounts a procfs of its
// own PID namespace on /proc, unless it is there (/proc/self is 1, the
// supervisor): a child started in a user namespace of its own gets its id
// maps written through /proc/PID, PID as this namespace numbers it (the
// host's procfs would name another process).
func ownProc() error {
	if self, _ := os.Readlink("/proc/self"); self == "1" {
		return nil
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	return mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
}

// buildRoot builds the sandbox's root file system on newRoot: the source
// root read-only (cfg.Layers as one overlay, cfg.RootFS, or the host's
// HostOSDirs), fresh /proc, /dev and /tmp (on gVisor, cfg.Runsc, its own
// /proc, /dev and /sys are mounted later, by runsc), and the workdir at
// /sandbox. The directories of cfg.Hide are covered by empty ones
// wherever they fall inside the source root.
func buildRoot(cfg SandboxConfig, newRoot string) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	if err := mount("corral", newRoot, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=755"); err != nil {
		return err
	}
	src, hostOS := cfg.RootFS, cfg.RootFS == "" && len(cfg.Layers) == 0
	switch {
	case len(cfg.Layers) > 0:
		src = newRoot + ".image"
		if err := mountLayers(cfg.Layers, cfg.IDs, src); err != nil {
			return err
		}
	case hostOS:
		src = "/"
	}
	if cfg.Files != nil {
		if err := bindListed(src, newRoot, cfg.Files, hostOS); err != nil {
			return err
		}
	} else if err := bindTop(src, newRoot, hostOS); err != nil {
		return err
	}
	if hostOS {
		if err := maskAll(filepath.Join(newRoot, "etc"), etcMasked); err != nil {
			return err
		}
	}
	for _, dir := range cfg.Hide {
		if rel, ok := Within(src, dir); ok {
			if err := hide(filepath.Join(newRoot, rel)); err != nil {
				return err
			}
		}
	}
	if err := kernelFS(cfg, newRoot); err != nil {
		return err
	}
	tmp := fmt.Sprintf("mode=1777,size=%d", cfg.Limits.Tmp())
	if err := mkdirMount("tmpfs", filepath.Join(newRoot, "tmp"), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, tmp); err != nil {
		return err
	}
	if err := mountWorkdir(cfg, filepath.Join(newRoot, "sandbox")); err != nil {
		return err
	}
	if err := mountTrust(cfg.Trust, newRoot); err != nil {
		return err
	}
	if err := unix.Mount("", newRoot, "", unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return fmt.Errorf("make the root read-only: %w", err)
	}
	return nil
}

// kernelFS mounts the kernel's file systems (/proc, /dev, /sys) in the
// root being built, or, on gVisor, the points its own are mounted on.
func kernelFS(cfg SandboxConfig, newRoot string) error {
	if cfg.Runsc != "" {
		return gvisorMountPoints(newRoot)
	}
	if err := mountProc(filepath.Join(newRoot, "proc")); err != nil {
		return err
	}
	if err := mountDev(filepath.Join(newRoot, "dev")); err != nil {
		return err
	}
	return mountSys(filepath.Join(newRoot, "sys"))
}

// bindTop binds the top-level entries of the source root src into
// newRoot, read-only; of the host's root (hostOS), only HostOSDirs.
func bindTop(src, newRoot string, hostOS bool) error {
	entries, err := os.ReadDir(src)
	if err != nil {
		return fmt.Errorf("read root %s: %w", src, err)
	}
	for _, e := range entries {
		name := e.Name()
		if provided[name] || (hostOS && !slices.Contains(HostOSDirs, name)) {
			continue
		}
		if err := bindEntry(filepath.Join(src, name), filepath.Join(newRoot, name)); err != nil {
			return err
		}
	}
	return nil
}

// bindListed binds the paths of the file lists that exist in the source
// root src into newRoot, read-only, and nothing else of it: what no list
// names is absent. Of the host's root (hostOS), only what lies in
// HostOSDirs. A path is looked up inside src, never through a symlink
// that leads out of it. The sandbox's own directories are left to the
// caller.
func bindListed(src, newRoot string, files *policy.Filesystem, hostOS bool) error {
	root, err := os.OpenRoot(src)
	if err != nil {
		return err
	}
	defer root.Close()
	paths := append(slices.Clone(files.ReadOnly), files.ReadWrite...)
	slices.SortFunc(paths, func(a, b string) int { return len(a) - len(b) }) // a directory before what is in it
	for _, p := range paths {
		rel := strings.TrimPrefix(filepath.Clean("/"+p), "/")
		if rel == "" {
			return bindTop(src, newRoot, hostOS)
		}
		top := strings.Split(rel, "/")[0]
		if provided[top] || (hostOS && !slices.Contains(HostOSDirs, top)) {
			continue
		}
		fi, err := root.Lstat(rel)
		if err != nil {
			continue // a path the root lacks (as Landlock ignores it), or one that leads out of it
		}
		from, to := filepath.Join(src, rel), filepath.Join(newRoot, rel)
		if _, err := os.Lstat(to); err == nil {
			continue // listed twice, or inside a path bound already
		}
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			return err
		}
		if !fi.IsDir() && fi.Mode()&os.ModeSymlink == 0 {
			if err := os.WriteFile(to, nil, 0o644); err != nil {
				return err
			}
			if err := mount(from, to, "", unix.MS_BIND, ""); err != nil {
				return err
			}
			if err := readOnly(to); err != nil {
				return err
			}
			continue
		}
		if err := bindEntry(from, to); err != nil {
			return err
		}
	}
	return nil
}

// bindEntry puts the directory or symlink from at to: a directory bound
// read-only, a symlink copied.
func bindEntry(from, to string) error {
	fi, err := os.Lstat(from)
	if err != nil {
		return err
	}
	switch {
	case fi.Mode()&os.ModeSymlink != 0:
		link, err := os.Readlink(from)
		if err != nil {
			return err
		}
		return os.Symlink(link, to)
	case fi.IsDir():
		return bindReadOnly(from, to)
	}
	return nil
}

// mountTrust mounts the egress certificates of the sandbox (none when trust
// is empty) at driver.TrustDir, and its bundle over the root's own CA
// bundle when it has a regular file there.
func mountTrust(trust, newRoot string) error {
	if trust == "" {
		return nil
	}
	if err := bindReadOnly(trust, filepath.Join(newRoot, driver.TrustDir)); err != nil {
		return err
	}
	system := filepath.Join(newRoot, driver.SystemBundle)
	if fi, err := os.Lstat(system); err != nil || !fi.Mode().IsRegular() {
		return nil
	}
	if err := mount(filepath.Join(trust, driver.BundleFile), system, "", unix.MS_BIND, ""); err != nil {
		return err
	}
	return readOnly(system)
}

// mountWorkdir mounts the sandbox's workdir (its directory, or its disk
// image) on dir, without setuid and device files.
func mountWorkdir(cfg SandboxConfig, dir string) error {
	if cfg.WorkdirImage == "" {
		if err := mkdirMount(cfg.Workdir, dir, "", unix.MS_BIND, ""); err != nil {
			return err
		}
		return mount("", dir, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_NOSUID|unix.MS_NODEV, "")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := diskimage.Mount(cfg.WorkdirImage, dir); err != nil {
		return err
	}
	return supervisor.GiveTree(dir, cfg.WorkdirOwner, cfg.WorkdirOwner)
}

// Within reports whether path lies inside (or is) root, both resolved on
// the host, and where relative to root.
func Within(root, path string) (string, bool) {
	if r, err := filepath.EvalSymlinks(root); err == nil {
		root = r
	}
	if p, err := filepath.EvalSymlinks(path); err == nil {
		path = p
	}
	rel, err := filepath.Rel(root, path)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", false
	}
	return rel, true
}

// maskAll covers what the patterns match under dir: files with /dev/null,
// directories with an empty one.
func maskAll(dir string, patterns []string) error {
	for _, pattern := range patterns {
		matches, _ := filepath.Glob(filepath.Join(dir, pattern))
		for _, p := range matches {
			fi, err := os.Lstat(p)
			switch {
			case err != nil || fi.Mode()&os.ModeSymlink != 0:
				continue // a link leads to a path that is masked or not bound
			case fi.IsDir():
				err = hide(p)
			default:
				err = mount("/dev/null", p, "", unix.MS_BIND, "")
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}

func mount(source, target, fstype string, flags uintptr, data string) error {
	if err := unix.Mount(source, target, fstype, flags, data); err != nil {
		what := fstype
		if what == "" {
			what = source
		}
		return fmt.Errorf("mount %s on %s: %w", what, target, err)
	}
	return nil
}

func mkdirMount(source, target, fstype string, flags uintptr, data string) error {
	if err := os.MkdirAll(target, 0o755); err != nil {
		return err
	}
	return mount(source, target, fstype, flags, data)
}

// bindReadOnly binds the tree at from onto to, read-only, without setuid
// and device files, all the way down.
func bindReadOnly(from, to string) error {
	if err := mkdirMount(from, to, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return err
	}
	return readOnly(to)
}

func readOnly(path string) error {
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
	err := unix.MountSetattr(unix.AT_FDCWD, path, unix.AT_RECURSIVE|unix.AT_SYMLINK_NOFOLLOW, attr)
	if errors.Is(err, unix.ENOSYS) {
		// Kernels before 5.12: the top mount only.
		err = unix.Mount("", path, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, "")
	}
	if err != nil {
		return fmt.Errorf("make %s read-only: %w", path, err)
	}
	return nil
}

// hide covers dir, when it exists, with an empty read-only directory.
func hide(dir string) error {
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return nil
	}
	return mount("tmpfs", dir, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=0,mode=755")
}

func mountProc(dir string) error {
	if err := mkdirMount("proc", dir, "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return err
	}
	for _, name := range procReadOnly {
		p := filepath.Join(dir, name)
		if _, err := os.Stat(p); err != nil {
			continue
		}
		if err := mount(p, p, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return err
		}
		if err := readOnly(p); err != nil {
			return err
		}
	}
	return maskAll(dir, procMasked)
}

func mountDev(dir string) error {
	if err := mkdirMount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "mode=755"); err != nil {
		return err
	}
	for _, name := range devices {
		p := filepath.Join(dir, name)
		f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY, 0o666)
		if err != nil {
			return err
		}
		f.Close()
		if err := mount("/dev/"+name, p, "", unix.MS_BIND, ""); err != nil {
			return err
		}
	}
	if err := mkdirMount("devpts", filepath.Join(dir, "pts"), "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620"); err != nil {
		return err
	}
	if err := mkdirMount("shm", filepath.Join(dir, "shm"), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=1777"); err != nil {
		return err
	}
	for link, target := range map[string]string{
		"ptmx": "pts/ptmx", "fd": "/proc/self/fd", "stdin": "/proc/self/fd/0",
		"stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2",
	} {
		if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
			return err
		}
	}
	return readOnlyTop(dir)
}

// readOnlyTop makes the mount at dir read-only without touching the mounts
// below it.
func readOnlyTop(dir string) error {
	if err := unix.Mount("", dir, "", unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID, ""); err != nil {
		return fmt.Errorf("make %s read-only: %w", dir, err)
	}
	return nil
}

func mountSys(dir string) error {
	if err := mkdirMount("sysfs", dir, "sysfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		// Without the right to mount sysfs (a user namespace), the host's.
		if err := bindReadOnly("/sys", dir); err != nil {
			return fmt.Errorf("sysfs: %w", err)
		}
	}
	return maskAll(dir, sysMasked)
}

// pivot makes newRoot the root of the mount namespace and detaches the old
// root, so nothing outside newRoot is reachable by path.
func pivot(newRoot string) error {
	if err := unix.Chdir(newRoot); err != nil {
		return err
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root to %s: %w", newRoot, err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach the old root: %w", err)
	}
	return unix.Chdir("/")
}

// hostPID is this process's pid as the host sees it, read before /proc is
// the sandbox's own.
func hostPID() (int, error) {
	link, err := os.Readlink("/proc/self")
	if err != nil {
		return 0, err
	}
	var pid int
	_, err = fmt.Sscanf(strings.TrimSpace(link), "%d", &pid)
	return pid, err
}
