package supervisor

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
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
