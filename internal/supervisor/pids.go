package supervisor

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/cgroups"
)

// limitPids mounts a pids cgroup hierarchy of the kernel this runs on at
// dir, makes the group PidsGroup in it that allows max processes and
// returns its cgroup.procs, open. The hierarchy stays mounted, for the
// execs to join (ExecStage.Cgroup); its files are root's.
func limitPids(dir string, max int64) (cgroups.Procs, error) {
	if err := unix.Mount("corral-pids", dir, "cgroup", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "pids"); err != nil {
		return nil, fmt.Errorf("mount a pids cgroup on %s: %w", dir, err)
	}
	group := filepath.Join(dir, PidsGroup)
	if err := os.Mkdir(group, 0o755); err != nil {
		return nil, fmt.Errorf("pids cgroup: %w", err)
	}
	if err := os.WriteFile(filepath.Join(group, "pids.max"), []byte(strconv.FormatInt(max, 10)), 0); err != nil {
		return nil, fmt.Errorf("pids cgroup: %w", err)
	}
	procs, err := os.OpenFile(filepath.Join(group, "cgroup.procs"), os.O_WRONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("pids cgroup: %w", err)
	}
	return cgroups.Procs{procs}, nil
}

// PidsGroup is the group limitPids makes.
const PidsGroup = "sandbox"
