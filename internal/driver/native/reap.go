package native

import (
	"os"

	"golang.org/x/sys/unix"
)

// reap waits, while the gateway lives, for the end of a supervisor it
// started, and reaps it; after the gateway, init does. It waits on the
// runtime's poller through a pidfd, readable once the process has ended,
// so a live sandbox costs the gateway a parked goroutine and a descriptor,
// not a thread blocked in waitid (Go ends a program at 10,000 threads).
func reap(p *os.Process) {
	fd, err := unix.PidfdOpen(p.Pid, unix.PIDFD_NONBLOCK)
	if err != nil { // a kernel without pidfds: a thread of its own, then
		go func() { _, _ = p.Wait() }()
		return
	}
	_ = p.Release() // Go's own handle: the pidfd opened here replaces it
	f := os.NewFile(uintptr(fd), "pidfd")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return
	}
	go func() {
		defer f.Close()
		_ = rc.Read(func(fd uintptr) bool {
			var info unix.Siginfo
			err := unix.Waitid(unix.P_PIDFD, int(fd), &info, unix.WEXITED|unix.WNOHANG, nil)
			return err != nil || info.Signo != 0 // reaped (or not ours to reap); else wait until it ends
		})
	}()
}
