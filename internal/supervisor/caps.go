package supervisor

import (
	"errors"
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// keptCapabilities are what a native sandbox's processes may keep of
// root's capabilities: Docker's default set without CAP_MKNOD and
// CAP_NET_RAW. Without CAP_SYS_ADMIN nothing can be mounted or remounted,
// without CAP_SYS_PTRACE the supervisor cannot be traced, and no module
// can be loaded.
// The Docker driver gives a container exactly these (by name).
var keptCapabilities = []struct {
	bit  int
	name string
}{
	{unix.CAP_CHOWN, "CAP_CHOWN"}, {unix.CAP_DAC_OVERRIDE, "CAP_DAC_OVERRIDE"},
	{unix.CAP_FSETID, "CAP_FSETID"}, {unix.CAP_FOWNER, "CAP_FOWNER"},
	{unix.CAP_SETGID, "CAP_SETGID"}, {unix.CAP_SETUID, "CAP_SETUID"},
	{unix.CAP_SETPCAP, "CAP_SETPCAP"}, {unix.CAP_SETFCAP, "CAP_SETFCAP"},
	{unix.CAP_NET_BIND_SERVICE, "CAP_NET_BIND_SERVICE"}, {unix.CAP_SYS_CHROOT, "CAP_SYS_CHROOT"},
	{unix.CAP_KILL, "CAP_KILL"}, {unix.CAP_AUDIT_WRITE, "CAP_AUDIT_WRITE"},
}

// KeptCapabilities returns the mask of keptCapabilities.
func KeptCapabilities() uint64 {
	var mask uint64
	for _, c := range keptCapabilities {
		mask |= 1 << c.bit
	}
	return mask
}

// KeptCapabilityNames returns the names of keptCapabilities
// ("CAP_CHOWN", ...), as container engines take them.
func KeptCapabilityNames() []string {
	names := make([]string, len(keptCapabilities))
	for i, c := range keptCapabilities {
		names[i] = c.name
	}
	return names
}

// dropCapabilities removes every other capability from the bounding,
// inheritable and ambient sets (and the effective and permitted ones) of
// the calling thread, which is then locked to it: capabilities are per
// thread, and this one is to exec the command.
func dropCapabilities() error {
	runtime.LockOSThread()
	keep := KeptCapabilities()
	for c := 0; c < 64; c++ {
		if keep&(1<<c) != 0 {
			continue
		}
		err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0)
		if errors.Is(err, unix.EINVAL) {
			break // past the last capability this kernel knows
		}
		if err != nil {
			return fmt.Errorf("drop capability %d: %w", c, err)
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("read capabilities: %w", err)
	}
	for i := range data {
		part := uint32(keep >> (32 * i))
		data[i].Effective &= part
		data[i].Permitted &= part
		data[i].Inheritable = 0
	}
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("set capabilities: %w", err)
	}
	return nil
}
