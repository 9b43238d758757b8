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
		// A supervisor's child between its fork and its exec (a spare
		// exec stage starting) still shows the supervisor's command line.
		if _, forking := procs[parent(pid)]; !forking {
			pids[pid] = args[3]
		}
	}
	return pids, err
}

// parent returns the parent's pid of process pid, or 0.
func parent(pid int) int {
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0
	}
	// pid (comm) state ppid ...: comm may hold spaces and parentheses.
	fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	if len(fields) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(fields[1])
	return ppid
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
