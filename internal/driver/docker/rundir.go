package docker

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/supervisor"
)

// runDirSize bounds an incarnation's run directory: the supervisor's
// reports and its control socket take a few KiB, and a workload that runs
// as root, which can write there too, gets no more of the gateway's disk
// (what it writes is memory, charged to the sandbox's memory limit).
const runDirSize = "4m"

// runDirInodes bounds the files in it.
const runDirInodes = "64"

// readyDir is the host directory mounted at runDir for one incarnation.
// The supervisor writes its reports there, and so can a workload that runs
// as root: the gateway reads them only with supervisor.ReadReport, and
// removes the directory with os.RemoveAll, which follows no symlink. A
// gateway that runs as root makes it a small tmpfs of its own (runDirSize),
// so that nothing written there lands on the gateway's disk.
func (d *Driver) readyDir(id string, gen int64) string {
	return filepath.Join(d.cfg.StateDir, "run", id+"-"+strconv.FormatInt(gen, 10))
}

// makeRunDir makes an incarnation's run directory, readable by all and
// writable by its owner alone (the gateway; in the container, root): a
// workload as policy.DefaultUser cannot touch the reports. As root it is a
// tmpfs of runDirSize, mounted once (a start after a reboot mounts it
// again); it is emptied of an earlier start's reports either way.
func (d *Driver) makeRunDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("docker: the run directory: %w", err)
	}
	if os.Geteuid() == 0 && !mountPoint(dir) {
		err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV,
			"size="+runDirSize+",nr_inodes="+runDirInodes+",mode=0755")
		if err != nil {
			return fmt.Errorf("docker: a tmpfs for the run directory %s: %w", dir, err)
		}
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return fmt.Errorf("docker: the run directory: %w", err)
	}
	clearRunDir(dir)
	return nil
}

// clearRunDir removes what a supervisor reported in an incarnation's run
// directory (whatever a workload put in their place: RemoveAll follows no
// symlink).
func clearRunDir(dir string) {
	for _, f := range []string{readyName, supervisor.FailedFile, supervisor.ProtectionsFile, controlName} {
		_ = os.RemoveAll(filepath.Join(dir, f))
	}
}

// removeRunDirs removes the run directories of sandbox id's incarnations,
// unmounting their tmpfs first; keep > 0 keeps that incarnation's.
func (d *Driver) removeRunDirs(id string, keep int64) error {
	matches, _ := filepath.Glob(filepath.Join(d.cfg.StateDir, "run", id+"-*"))
	for _, m := range matches {
		if keep > 0 && m == d.readyDir(id, keep) {
			continue
		}
		if err := unix.Unmount(m, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EPERM) {
			return fmt.Errorf("docker: unmount the run directory %s: %w", m, err)
		}
		if err := os.RemoveAll(m); err != nil {
			return fmt.Errorf("docker: remove the run directory: %w", err)
		}
	}
	return nil
}

// mountPoint says whether dir is mounted on (its device differs from its
// parent's).
func mountPoint(dir string) bool {
	var st, parent syscall.Stat_t
	if syscall.Lstat(dir, &st) != nil || syscall.Lstat(filepath.Dir(dir), &parent) != nil {
		return false
	}
	return st.Dev != parent.Dev
}
