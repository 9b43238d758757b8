package testenv

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Supervisors returns the live native supervisor processes
// (`corral-supervise sandbox BUNDLE`) whose bundle is under stateDir: their
// pids and bundles.
func Supervisors(stateDir string) (map[int]string, error) {
	procs, err := Processes(func(args []string) bool {
		return len(args) >= 4 && args[0] == "corral-supervise" && strings.HasPrefix(args[3], stateDir+"/")
	})
	pids := map[int]string{}
	for pid, args := range procs {
		pids[pid] = args[3]
	}
	return pids, err
}

// Processes returns the live processes (not zombies) whose command line
// match accepts: their pids and command lines.
func Processes(match func(args []string) bool) (map[int][]string, error) {
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	found := map[int][]string{}
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
		if !match(args) {
			continue
		}
		if stat, err := os.ReadFile(filepath.Join("/proc", p.Name(), "stat")); err == nil && !bytes.Contains(stat, []byte(") Z ")) {
			found[pid] = args
		}
	}
	return found, nil
}
