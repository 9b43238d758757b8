package testenv

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Supervisors returns the pids of the live native supervisor processes
// (`corral-supervise sandbox BUNDLE`) whose bundle is under stateDir.
func Supervisors(stateDir string) ([]int, error) {
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(cmdline), "\x00")
		if len(args) < 4 || args[0] != "corral-supervise" || !strings.HasPrefix(args[3], stateDir+"/") {
			continue
		}
		if stat, err := os.ReadFile(filepath.Join("/proc", p.Name(), "stat")); err == nil && !bytes.Contains(stat, []byte(") Z ")) {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}
