// Package cgroups puts a process into a cgroup of its own with memory, CPU
// and PID limits, on cgroup v2 or, where the host has only that, on the v1
// memory, cpu and pids hierarchies.
package cgroups

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Root is where cgroup file systems are mounted.
var Root = "/sys/fs/cgroup"

// Limits are the limits of a group; zero means unlimited.
type Limits struct {
	MemoryBytes int64
	CPUMillis   int64 // thousandths of a CPU
	Pids        int64
}

// cpuPeriod is the CFS period that CPU quotas are expressed in (100 ms).
const cpuPeriod = 100000

// Unified reports whether the host runs cgroup v2 alone.
func Unified() bool {
	_, err := os.Stat(filepath.Join(Root, "cgroup.controllers"))
	return err == nil
}

// v1Controllers are the v1 hierarchies a group is made in.
var v1Controllers = []string{"memory", "cpu", "pids"}

// dirs returns the directories of group name (a relative path such as
// "corral/ID"), one per hierarchy.
func dirs(name string) []string {
	if Unified() {
		return []string{filepath.Join(Root, name)}
	}
	out := make([]string, 0, len(v1Controllers))
	for _, c := range v1Controllers {
		out = append(out, filepath.Join(Root, c, name))
	}
	return out
}

// Join makes group name, applies the limits and moves the calling process
// into it, so that every process it starts afterwards is limited too.
func Join(name string, l Limits) error {
	if Unified() {
		return joinV2(filepath.Join(Root, name), l)
	}
	return joinV1(name, l)
}

func joinV2(dir string, l Limits) error {
	// Every ancestor delegates the controllers to its children.
	rel, err := filepath.Rel(Root, dir)
	if err != nil {
		return err
	}
	p := Root
	for _, part := range strings.Split(rel, "/") {
		if err := enableControllers(p); err != nil {
			return err
		}
		p = filepath.Join(p, part)
		if err := os.Mkdir(p, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
	}
	if l.MemoryBytes > 0 {
		if err := write(dir, "memory.max", strconv.FormatInt(l.MemoryBytes, 10)); err != nil {
			return err
		}
		_ = write(dir, "memory.swap.max", "0") // absent without swap accounting
	}
	if l.CPUMillis > 0 {
		if err := write(dir, "cpu.max", fmt.Sprintf("%d %d", l.CPUMillis*cpuPeriod/1000, cpuPeriod)); err != nil {
			return err
		}
	}
	if l.Pids > 0 {
		if err := write(dir, "pids.max", strconv.FormatInt(l.Pids, 10)); err != nil {
			return err
		}
	}
	return write(dir, "cgroup.procs", "0")
}

func enableControllers(dir string) error {
	have, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return err
	}
	var want []string
	for _, c := range []string{"memory", "cpu", "pids"} {
		if strings.Contains(" "+strings.TrimSpace(string(have))+" ", " "+c+" ") {
			want = append(want, "+"+c)
		}
	}
	if len(want) == 0 {
		return nil
	}
	return write(dir, "cgroup.subtree_control", strings.Join(want, " "))
}

func joinV1(name string, l Limits) error {
	settings := map[string][][2]string{
		"memory": nil, "cpu": nil, "pids": nil,
	}
	if l.MemoryBytes > 0 {
		v := strconv.FormatInt(l.MemoryBytes, 10)
		settings["memory"] = [][2]string{{"memory.limit_in_bytes", v}, {"memory.memsw.limit_in_bytes", v}}
	}
	if l.CPUMillis > 0 {
		settings["cpu"] = [][2]string{{"cpu.cfs_period_us", strconv.Itoa(cpuPeriod)}, {"cpu.cfs_quota_us", strconv.FormatInt(l.CPUMillis*cpuPeriod/1000, 10)}}
	}
	if l.Pids > 0 {
		settings["pids"] = [][2]string{{"pids.max", strconv.FormatInt(l.Pids, 10)}}
	}
	for _, c := range v1Controllers {
		dir := filepath.Join(Root, c, name)
		if _, err := os.Stat(filepath.Join(Root, c)); err != nil {
			if len(settings[c]) > 0 {
				return fmt.Errorf("the %s controller is not mounted at %s", c, filepath.Join(Root, c))
			}
			continue
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		for _, kv := range settings[c] {
			err := write(dir, kv[0], kv[1])
			if err != nil && kv[0] == "memory.memsw.limit_in_bytes" && errors.Is(err, os.ErrNotExist) {
				continue // no swap accounting on this host
			}
			if err != nil {
				return err
			}
		}
		if err := write(dir, "cgroup.procs", "0"); err != nil {
			return err
		}
	}
	return nil
}

func write(dir, file, value string) error {
	if err := os.WriteFile(filepath.Join(dir, file), []byte(value), 0); err != nil {
		return fmt.Errorf("cgroup: set %s to %s: %w", filepath.Join(dir, file), value, err)
	}
	return nil
}

// Remove removes group name from every hierarchy; a missing group is no
// error. It fails while processes are still in it.
func Remove(name string) error {
	var errs []error
	for _, dir := range dirs(name) {
		if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("cgroup: remove %s: %w", dir, err))
		}
	}
	return errors.Join(errs...)
}

// Path returns the group's directory in the hierarchy of controller (the
// one directory of a v2 host whatever the controller).
func Path(name, controller string) string {
	if Unified() {
		return filepath.Join(Root, name)
	}
	return filepath.Join(Root, controller, name)
}
