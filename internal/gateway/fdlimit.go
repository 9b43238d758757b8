package gateway

import (
	"os"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// wantFiles is the descriptor limit the gateway asks for: enough for the
// sandboxes a big host runs, each with its control connections, logs and
// egress proxy.
const wantFiles = 1 << 20

// raiseFileLimit raises the gateway's RLIMIT_NOFILE as far as it may: to
// wantFiles (at most fs.nr_open) where it has CAP_SYS_RESOURCE, else the
// soft limit to the hard one (which the Go runtime did already). It
// returns the soft limit in force.
//
// It calls prlimit64 itself: Go's Setrlimit and Prlimit would forget the
// limits the process started with, which Go gives back to every child,
// and the native driver's supervisors (and their sandboxes) would inherit
// the gateway's.
func raiseFileLimit() uint64 {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return 1024
	}
	want := uint64(wantFiles)
	if b, err := os.ReadFile("/proc/sys/fs/nr_open"); err == nil {
		if n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil {
			want = min(want, n)
		}
	}
	for _, next := range []unix.Rlimit{{Cur: want, Max: max(want, lim.Max)}, {Cur: lim.Max, Max: lim.Max}} {
		if next.Cur <= lim.Cur {
			continue
		}
		_, _, errno := unix.RawSyscall6(unix.SYS_PRLIMIT64, 0, unix.RLIMIT_NOFILE, uintptr(unsafe.Pointer(&next)), 0, 0, 0)
		if errno == 0 {
			return next.Cur
		}
	}
	return lim.Cur
}

// egressBudget is how many connections all sandboxes' egress proxies may
// hold together: each takes two descriptors (the sandbox's and the
// server's), and half the gateway's descriptors stay for its API, its
// store, its drivers and its supervisors' connections.
func egressBudget(files uint64) int {
	return int(max(files/4, 64))
}
