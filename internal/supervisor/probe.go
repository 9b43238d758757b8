package supervisor

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// probes try one thing each that a sandbox's policy may forbid, for tests
// and for people checking a sandbox by hand (`corral supervise probe`).
// Each returns what happened: "ok", an errno's name, or a value. None has
// an effect beyond the probing process, even run on a host as root.
var probes = map[string]func() string{
	// A file system type that does not exist: ENODEV where mounting is
	// allowed at all, and nothing is ever mounted.
	"mount": func() string { return result(unix.Mount("none", "/", "corral-no-such-fs", 0, "")) },
	"ptrace": func() string {
		// Attach to no process: ESRCH when ptrace is allowed at all.
		_, _, e := unix.Syscall(unix.SYS_PTRACE, unix.PTRACE_ATTACH, noSuchPID, 0)
		return errnoResult(e)
	},
	"bpf": func() string {
		var attr [64]byte
		_, _, e := unix.Syscall(unix.SYS_BPF, unix.BPF_MAP_CREATE, uintptr(unsafe.Pointer(&attr[0])), unsafe.Sizeof(attr))
		return errnoResult(e)
	},
	"keyctl": func() string {
		_, err := unix.KeyctlGetKeyringID(unix.KEY_SPEC_SESSION_KEYRING, true)
		return result(err)
	},
	"unshare": func() string { return result(unix.Unshare(unix.CLONE_NEWUTS)) },
	"no_new_privs": func() string {
		v, err := unix.PrctlRetInt(unix.PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0)
		return valueResult(v, err)
	},
	"seccomp": func() string {
		v, err := unix.PrctlRetInt(unix.PR_GET_SECCOMP, 0, 0, 0, 0)
		return valueResult(v, err)
	},
	"uid": func() string { return fmt.Sprint(os.Getuid()) },
	// Landlock's ABI version: a number, or ENOSYS on a kernel without
	// Landlock (gVisor's among them); no ruleset is made.
	"landlock": func() string {
		v, _, e := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
		if e != 0 {
			return errnoResult(e)
		}
		return fmt.Sprintf("ABI %d", v)
	},
	// No entries and no parameters: EINVAL or EFAULT where io_uring is
	// allowed at all, and no ring is made.
	"io_uring": func() string {
		_, _, e := unix.Syscall(unix.SYS_IO_URING_SETUP, 0, 0, 0)
		return errnoResult(e)
	},
	// Turn off address space randomization, then back: "ok" where it
	// is allowed.
	"personality": func() string {
		prev, _, e := unix.Syscall(unix.SYS_PERSONALITY, addrNoRandomize, 0, 0)
		if e == 0 {
			_, _, _ = unix.Syscall(unix.SYS_PERSONALITY, prev, 0, 0)
		}
		return errnoResult(e)
	},
}

// noSuchPID is past the largest pid Linux hands out (2^22).
const noSuchPID = 1<<22 + 1

// Probe runs the named probes and returns "name: result" lines. A name
// "connect:PATH" connects to the Unix socket at PATH (and closes it).
func Probe(names []string) ([]string, error) {
	var out []string
	for _, n := range names {
		p, ok := probes[n]
		if path, isConnect := strings.CutPrefix(n, "connect:"); isConnect {
			p, ok = func() string { return connectUnix(path) }, true
		}
		if !ok {
			return nil, fmt.Errorf("unknown probe %q", n)
		}
		out = append(out, n+": "+p())
	}
	return out, nil
}

// connectUnix connects to the stream socket at path: "ok", or the errno.
func connectUnix(path string) string {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return result(err)
	}
	defer unix.Close(fd)
	return result(unix.Connect(fd, &unix.SockaddrUnix{Name: path}))
}

func result(err error) string {
	var e unix.Errno
	if errors.As(err, &e) {
		return errnoResult(e)
	}
	if err != nil {
		return err.Error()
	}
	return "ok"
}

func errnoResult(e unix.Errno) string {
	if e == 0 {
		return "ok"
	}
	return unix.ErrnoName(e)
}

func valueResult(v int, err error) string {
	if err != nil {
		return result(err)
	}
	return fmt.Sprint(v)
}

// addrNoRandomize is personality(2)'s ADDR_NO_RANDOMIZE.
const addrNoRandomize = 0x0040000
