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
	"time"
)

// freezeWait bounds how long Freeze waits for the kernel to say a group
// is frozen or thawed.
const freezeWait = 5 * time.Second

// freezerDir is the v1 freezer directory of group name.
func freezerDir(name string) string { return filepath.Join(Root, "freezer", name) }

// Freeze freezes every process of group name (and of the groups under
// it), or thaws them, and waits until the kernel says so. A frozen process
// keeps its memory and uses no CPU. On cgroup v1 the group's processes
// join its freezer group first: the freezer is a hierarchy of its own.
func Freeze(name string, frozen bool) error {
	if Unified() {
		value, want := "0", "frozen 0"
		if frozen {
			value, want = "1", "frozen 1"
		}
		dir := filepath.Join(Root, name)
		if err := write(filepath.Join(dir, "cgroup.freeze"), value); err != nil {
			return err
		}
		return waitFor(func() (bool, error) {
			events, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
			return slices.Contains(strings.Split(string(events), "\n"), want), err
		}, name, frozen)
	}
	dir := freezerDir(name)
	if !frozen {
		if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
			return nil // never frozen
		}
		if err := write(filepath.Join(dir, "freezer.state"), "THAWED"); err != nil {
			return err
		}
		return waitFor(func() (bool, error) { return v1State(dir, "THAWED") }, name, frozen)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("cgroup: %w", err)
	}
	// A process that forked before the freeze joins afterwards, and
	// freezes as it joins: a second pass finds it.
	for range 2 {
		if err := joinFreezer(name, dir); err != nil {
			return err
		}
		if err := waitFor(func() (bool, error) { return freezeV1(dir) }, name, frozen); err != nil {
			_ = write(filepath.Join(dir, "freezer.state"), "THAWED")
			return err
		}
	}
	return nil
}

// freezeV1 asks the v1 freezer group at dir to freeze and reports whether
// it is frozen. Asked once, a v1 group can stay FREEZING for good: a task
// woken after the kernel's pass over the group (a ptrace stop of gVisor's
// ptrace platform, a fork) is never frozen. Each new FROZEN makes the
// kernel pass over the group again, so it is written on every poll.
func freezeV1(dir string) (bool, error) {
	if err := write(filepath.Join(dir, "freezer.state"), "FROZEN"); err != nil {
		return false, err
	}
	return v1State(dir, "FROZEN")
}

// thawAll thaws group name and every group under it that was frozen, not
// waiting for the kernel: what Kill does first.
func thawAll(name string) error {
	dir, file, value := filepath.Join(Root, name), "cgroup.freeze", "0"
	if !Unified() {
		dir, file, value = freezerDir(name), "freezer.state", "THAWED"
	}
	err := filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
		if err != nil || !e.IsDir() {
			return err
		}
		if err := write(filepath.Join(path, file), value); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	})
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// Frozen reports whether group name is frozen.
func Frozen(name string) (bool, error) {
	if Unified() {
		events, err := os.ReadFile(filepath.Join(Root, name, "cgroup.events"))
		if errors.Is(err, os.ErrNotExist) {
			return false, nil
		}
		return slices.Contains(strings.Split(string(events), "\n"), "frozen 1"), err
	}
	frozen, err := v1State(freezerDir(name), "FROZEN")
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	return frozen, err
}

// v1State reports whether the v1 freezer group at dir is in state want.
func v1State(dir, want string) (bool, error) {
	state, err := os.ReadFile(filepath.Join(dir, "freezer.state"))
	return strings.TrimSpace(string(state)) == want, err
}

// joinFreezer moves every process of group name's other hierarchies into
// its freezer group at dir.
func joinFreezer(name, dir string) error {
	procs, err := os.OpenFile(filepath.Join(dir, "cgroup.procs"), os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("cgroup: %w", err)
	}
	defer procs.Close()
	return eachProcess(name, func(pid int, _ string) error {
		if _, err := procs.WriteString(strconv.Itoa(pid)); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("cgroup: freeze process %d of %s: %w", pid, name, err)
		}
		return nil
	})
}

// waitFor polls done until it holds, fails, or freezeWait passes.
func waitFor(done func() (bool, error), name string, frozen bool) error {
	what := "thaw"
	if frozen {
		what = "freeze"
	}
	deadline := time.Now().Add(freezeWait)
	for {
		ok, err := done()
		switch {
		case err != nil:
			return fmt.Errorf("cgroup: %s %s: %w", what, name, err)
		case ok:
			return nil
		case time.Now().After(deadline):
			return fmt.Errorf("cgroup: %s %s: the kernel did not finish in %s", what, name, freezeWait)
		}
		time.Sleep(time.Millisecond)
	}
}
