// Package cgroups makes cgroups with memory, CPU and PID limits and moves
// processes into them, on cgroup v2 or, where the host has only that, on
// the v1 memory, cpu and pids hierarchies.
package cgroups

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
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

// controllers are the controllers a group uses.
var controllers = []string{"memory", "cpu", "pids"}

// Unified reports whether the host runs cgroup v2 alone.
func Unified() bool {
	_, err := os.Stat(filepath.Join(Root, "cgroup.controllers"))
	return err == nil
}

// Has says whether the host has a controller: in the unified hierarchy's
// root, or mounted as a v1 hierarchy of its own.
func Has(controller string) bool {
	if Unified() {
		have, err := os.ReadFile(filepath.Join(Root, "cgroup.controllers"))
		return err == nil && slices.Contains(strings.Fields(string(have)), controller)
	}
	_, err := os.Stat(filepath.Join(Root, controller))
	return err == nil
}

// dirs returns the directories of group name (a relative path such as
// "corral/ID/sandbox"), one per hierarchy.
func dirs(name string) []string {
	if Unified() {
		return []string{filepath.Join(Root, name)}
	}
	var out []string
	for _, c := range controllers {
		if _, err := os.Stat(filepath.Join(Root, c)); err == nil {
			out = append(out, filepath.Join(Root, c, name))
		}
	}
	return out
}

// Create makes group name, and its parents, with the limits.
func Create(name string, l Limits) error {
	if Unified() {
		if err := makeV2(name); err != nil {
			return err
		}
	} else {
		if err := makeV1(name, l); err != nil {
			return err
		}
	}
	for _, s := range settings(l) {
		if err := write(filepath.Join(pathOf(name, s.controller), s.file), s.value); err != nil && !s.optional {
			return err
		}
	}
	return nil
}

// makeV2 makes the group's directories, each ancestor delegating the
// controllers to its children.
func makeV2(name string) error {
	p := Root
	for _, part := range strings.Split(name, "/") {
		if err := enableControllers(p); err != nil {
			return err
		}
		p = filepath.Join(p, part)
		if err := os.Mkdir(p, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
	}
	return nil
}

func enableControllers(dir string) error {
	have, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return err
	}
	var want []string
	for _, c := range controllers {
		if strings.Contains(" "+strings.TrimSpace(string(have))+" ", " "+c+" ") {
			want = append(want, "+"+c)
		}
	}
	if len(want) == 0 {
		return nil
	}
	return write(filepath.Join(dir, "cgroup.subtree_control"), strings.Join(want, " "))
}

func makeV1(name string, l Limits) error {
	for _, s := range settings(l) {
		if _, err := os.Stat(filepath.Join(Root, s.controller)); err != nil && !s.optional {
			return fmt.Errorf("cgroup: the %s controller is not mounted at %s", s.controller, filepath.Join(Root, s.controller))
		}
	}
	for _, dir := range dirs(name) {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("cgroup: %w", err)
		}
	}
	return nil
}

// setting is one limit file of a group.
type setting struct {
	controller, file, value string
	optional                bool // absent on some hosts (swap accounting)
}

func settings(l Limits) []setting {
	var s []setting
	v2 := Unified()
	if l.MemoryBytes > 0 {
		v := strconv.FormatInt(l.MemoryBytes, 10)
		if v2 {
			s = append(s, setting{"memory", "memory.max", v, false}, setting{"memory", "memory.swap.max", "0", true})
		} else {
			s = append(s, setting{"memory", "memory.limit_in_bytes", v, false}, setting{"memory", "memory.memsw.limit_in_bytes", v, true})
		}
	}
	if l.CPUMillis > 0 {
		quota := strconv.FormatInt(l.CPUMillis*cpuPeriod/1000, 10)
		if v2 {
			s = append(s, setting{"cpu", "cpu.max", quota + " " + strconv.Itoa(cpuPeriod), false})
		} else {
			s = append(s, setting{"cpu", "cpu.cfs_period_us", strconv.Itoa(cpuPeriod), false}, setting{"cpu", "cpu.cfs_quota_us", quota, false})
		}
	}
	if l.Pids > 0 {
		s = append(s, setting{"pids", "pids.max", strconv.FormatInt(l.Pids, 10), false})
	}
	return s
}

func pathOf(name, controller string) string {
	if Unified() {
		return filepath.Join(Root, name)
	}
	return filepath.Join(Root, controller, name)
}

// Pids are the open pids.max and pids.current files of a group: they
// are read even after the caller's root changed.
type Pids struct{ max, current *os.File }

// OpenPids opens the pids files of group name ("" is the group the caller
// sees as its root: a container's own).
func OpenPids(name string) (*Pids, error) {
	dir := pathOf(name, "pids")
	max, err := os.Open(filepath.Join(dir, "pids.max"))
	if err != nil {
		return nil, err
	}
	current, err := os.Open(filepath.Join(dir, "pids.current"))
	if err != nil {
		max.Close()
		return nil, err
	}
	return &Pids{max: max, current: current}, nil
}

// Free returns how many more tasks the group may have (pids.max less
// pids.current, below 0 when over); ok is false when it has no limit or
// the files cannot be read.
func (p *Pids) Free() (free int64, ok bool) {
	limit, err1 := readInt(p.max) // "max": no limit
	current, err2 := readInt(p.current)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return limit - current, true
}

func readInt(f *os.File) (int64, error) {
	var buf [32]byte
	n, err := f.ReadAt(buf[:], 0)
	if n == 0 {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(buf[:n])), 10, 64)
}

// Close closes the files.
func (p *Pids) Close() error {
	p.max.Close()
	return p.current.Close()
}

func write(path, value string) error {
	if err := os.WriteFile(path, []byte(value), 0); err != nil {
		return fmt.Errorf("cgroup: set %s to %s: %w", path, value, err)
	}
	return nil
}

// Procs are the open cgroup.procs files of a group, one per hierarchy:
// they add processes to the group even after the caller's root changed.
type Procs []*os.File

// OpenProcs opens the cgroup.procs files of group name.
func OpenProcs(name string) (Procs, error) {
	var p Procs
	for _, dir := range dirs(name) {
		f, err := os.OpenFile(filepath.Join(dir, "cgroup.procs"), os.O_WRONLY, 0)
		if err != nil {
			p.Close()
			return nil, fmt.Errorf("cgroup: %w", err)
		}
		p = append(p, f)
	}
	return p, nil
}

// Add moves process pid (0: the caller) into the group.
func (p Procs) Add(pid int) error {
	for _, f := range p {
		if _, err := f.WriteString(strconv.Itoa(pid)); err != nil {
			return fmt.Errorf("cgroup: add process %d to %s: %w", pid, f.Name(), err)
		}
	}
	return nil
}

// Close closes the files.
func (p Procs) Close() {
	for _, f := range p {
		f.Close()
	}
}

// Kill sends SIGKILL to every process in group name and the groups under
// it, thawing them first (a frozen process dies only once thawed).
func Kill(name string) error {
	var errs []error
	if err := thawAll(name); err != nil {
		errs = append(errs, err)
	}
	err := eachProcess(name, func(pid int, group string) error {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("cgroup: kill %d of %s: %w", pid, group, err))
		}
		return nil
	})
	return errors.Join(append(errs, err)...)
}

// eachProcess calls fn with every process of group name and the groups
// under it, in each hierarchy, and the group's directory; a missing group
// has none.
func eachProcess(name string, fn func(pid int, group string) error) error {
	for _, dir := range dirs(name) {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return err
			}
			data, err := os.ReadFile(filepath.Join(path, "cgroup.procs"))
			if err != nil {
				return err
			}
			for _, f := range strings.Fields(string(data)) {
				if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
					if err := fn(pid, path); err != nil {
						return err
					}
				}
			}
			return nil
		})
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("cgroup: %w", err)
		}
	}
	return nil
}

// Remove removes group name and the groups under it from every hierarchy
// (the v1 freezer's too); a missing group is no error. It fails while
// processes are still in it.
func Remove(name string) error {
	var errs []error
	if !Unified() {
		entries, _ := os.ReadDir(freezerDir(name))
		for _, e := range entries {
			if e.IsDir() {
				if err := os.Remove(filepath.Join(freezerDir(name), e.Name())); err != nil && !errors.Is(err, os.ErrNotExist) {
					errs = append(errs, fmt.Errorf("cgroup: remove %s: %w", filepath.Join(freezerDir(name), e.Name()), err))
				}
			}
		}
		if err := os.Remove(freezerDir(name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("cgroup: remove %s: %w", freezerDir(name), err))
		}
	}
	for _, dir := range dirs(name) {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if e.IsDir() {
				if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, os.ErrNotExist) {
					errs = append(errs, fmt.Errorf("cgroup: remove %s: %w", filepath.Join(dir, e.Name()), err))
				}
			}
		}
		if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("cgroup: remove %s: %w", dir, err))
		}
	}
	return errors.Join(errs...)
}
