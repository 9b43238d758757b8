package supervisor

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// UserNamespace returns a user namespace that maps 0…r.Size-1 to r's host
// ids, as the sandbox's processes get theirs: what an idmapped mount needs
// to show host files owned by the image's ids as the sandbox's. No program
// runs in it: a child is made in it, stopped at its exec (traced), and
// killed once the namespace is open.
func UserNamespace(r IDRange) (*os.File, error) {
	runtime.LockOSThread() // the tracer is this thread
	defer runtime.UnlockOSThread()
	m := []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(r.Base), Size: int(r.Size)}}
	cmd := exec.Command("/proc/self/exe")
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: unix.CLONE_NEWUSER, UidMappings: m, GidMappings: m,
		Ptrace: true, Pdeathsig: unix.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("make a user namespace for ids %d…: %w", r.Base, err)
	}
	ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/user", cmd.Process.Pid))
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if err != nil {
		return nil, fmt.Errorf("open the user namespace for ids %d…: %w", r.Base, err)
	}
	return ns, nil
}

// mapIDs maps uid and gid 0…r.Size-1 of the user namespace of process pid
// (one with nothing mapped yet) to r's host ids, and lets it set its
// groups, as os.StartProcess maps a child's. pid is as this process's
// /proc numbers it.
func mapIDs(pid int, r IDRange) error {
	line := []byte(fmt.Sprintf("0 %d %d\n", r.Base, r.Size))
	for _, f := range []struct {
		name string
		data []byte
	}{{"uid_map", line}, {"setgroups", []byte("allow")}, {"gid_map", line}} {
		if err := os.WriteFile(fmt.Sprintf("/proc/%d/%s", pid, f.name), f.data, 0); err != nil {
			return fmt.Errorf("map the ids of process %d: %w", pid, err)
		}
	}
	return nil
}

// allCapabilities lists every capability the running kernel knows.
func allCapabilities() []uintptr {
	last := unix.CAP_LAST_CAP
	if data, err := os.ReadFile("/proc/sys/kernel/cap_last_cap"); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(data))); err == nil {
			last = n
		}
	}
	caps := make([]uintptr, last+1)
	for i := range caps {
		caps[i] = uintptr(i)
	}
	return caps
}
