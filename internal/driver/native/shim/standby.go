package shim

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/fdpass"
	"github.com/corral-sandbox/corral/internal/supervisor"
)

// StandbyFD is the socket a standby supervisor waits on for its sandbox.
const StandbyFD = 3

// maxHandoff bounds a handoff's message, a bundle's path.
const maxHandoff = 4 << 10

// standbyName is what ps shows of a standby until its handoff.
const standbyName = "corral-standby"

// retitle makes the process's command line (what ps and /proc/PID/cmdline
// show) argv, where the space of the one it was started with allows: the
// kernel shows the memory its arguments were passed in, which os.Args
// still point into (StandbyArgv's padding leaves room for a bundle's
// path). os.Args keeps its values, copied.
func retitle(argv []string) {
	old := os.Args
	if len(old) == 0 {
		return
	}
	start := unsafe.StringData(old[0])
	size := 0
	for _, a := range old {
		if unsafe.StringData(a) != (*byte)(unsafe.Add(unsafe.Pointer(start), size)) {
			return // not one block, as the kernel passed it
		}
		size += len(a) + 1
	}
	title := []byte(strings.Join(argv, "\x00") + "\x00")
	if len(title) > size {
		return
	}
	os.Args = make([]string, len(old))
	for i, a := range old {
		os.Args[i] = strings.Clone(a)
	}
	area := unsafe.Slice(start, size)
	clear(area[copy(area, title):])
}

// Handoff gives a standby supervisor (RunStandby) its sandbox on conn,
// which it closes: the bundle directory, the descriptors RunSandbox
// inherits when started for it (ReadyFD's pipe and LockFD's lock), and its
// log, which becomes its stdout and stderr.
func Handoff(conn *os.File, bundle string, ready, lock, log *os.File) error {
	return fdpass.Send(conn, []*os.File{ready, lock, log}, []byte(bundle))
}

// RunStandby is a native supervisor started ahead of its sandbox, in new
// namespaces, so that a start does not wait for this program to start: it
// waits on StandbyFD for a Handoff, takes what it is handed as the
// descriptors RunSandbox expects, and goes on as RunSandbox of the bundle.
// It exits, having done nothing, when the socket closes without a
// handoff (the gateway gone, or done with it). With spareAhead, it starts
// the main process's exec stage before it waits (Children.StartSpareAhead),
// so that its program start is off the start's path too: a sandbox with an
// id range gets it mapped to that range, any other lets it go.
func RunStandby(spareAhead bool) int {
	supervisor.SetProcessName(standbyName)
	children := new(supervisor.Children)
	if spareAhead {
		children.Spare, children.DropCaps = true, true
		children.StartSpareAhead()
	}
	ctl := os.NewFile(StandbyFD, "standby")
	fds, bundle, err := fdpass.Receive(ctl, maxHandoff)
	ctl.Close()
	if err != nil {
		return 0
	}
	dir, err := handedBundle(bundle, len(fds))
	if err != nil {
		// A gateway killed between the descriptors and the path: nothing
		// is its to run; the lock it was handed goes with it.
		return 1
	}
	// Named and shown as a supervisor started for its sandbox is.
	if exe, err := os.Executable(); err == nil {
		supervisor.SetProcessName(filepath.Base(exe))
	}
	retitle(supervisor.SandboxArgv(dir))
	// Out of the way of the numbers they take, then into them.
	for i, fd := range fds {
		moved, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 10)
		if err != nil {
			fmt.Fprintf(os.Stderr, "corral supervise: %v\n", err)
			return 1
		}
		unix.Close(fd)
		fds[i] = moved
	}
	for _, m := range []struct{ from, to int }{{fds[0], ReadyFD}, {fds[1], LockFD}, {fds[2], 1}, {fds[2], 2}} {
		if err := unix.Dup3(m.from, m.to, 0); err != nil {
			fmt.Fprintf(os.Stderr, "corral supervise: descriptor %d: %v\n", m.to, err)
			return 1
		}
	}
	for _, fd := range fds {
		unix.Close(fd)
	}
	return runSandbox(dir, children)
}

// handedBundle checks a handoff of files descriptors and the message msg:
// three, and a bundle's path, absolute and clean (a handoff whose sender
// died before its path came has none).
func handedBundle(msg []byte, files int) (string, error) {
	dir := string(msg)
	if files != 3 {
		return "", fmt.Errorf("a handoff of %d descriptors, not 3", files)
	}
	if !filepath.IsAbs(dir) || filepath.Clean(dir) != dir {
		return "", fmt.Errorf("a handoff of %q, not a bundle's path", dir)
	}
	return dir, nil
}
