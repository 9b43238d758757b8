package supervisor

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/fdpass"
)

// A spare is an exec stage started before a command asks for it, so that
// the start of this Go program (tens of milliseconds for this binary: the
// inits of some 230 packages) is paid ahead of the exec, not in it. It
// waits on a socket for the command, its environment and its descriptors,
// takes them as its own and goes on as the exec stage does. It runs in the
// sandbox already (its namespaces, its cgroup, its user namespace), as
// root there, but applies nothing and runs nothing until asked: a
// workload that kills it only makes its next exec start cold.

// spareRequest is what a spare is asked to run. The descriptors come with
// it: Stdio of them, then the report.
type spareRequest struct {
	Command []string `json:"command"`
	Env     []string `json:"env"`
	TTY     bool     `json:"tty"`
	Stdio   int      `json:"stdio"`
	// Dir is the command's working directory.
	Dir string `json:"dir"`
	// Root is the root directory the command must run in (its supervisor's
	// when it asks): a spare whose own is another runs nothing.
	Root fileID `json:"root"`
}

// fileID identifies a file: its device and inode numbers.
type fileID struct {
	Dev uint64 `json:"dev"`
	Ino uint64 `json:"ino"`
}

// rootOf identifies the directory path.
func rootOf(path string) (fileID, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return fileID{}, fmt.Errorf("stat %s: %w", path, err)
	}
	return fileID{Dev: st.Dev, Ino: st.Ino}, nil
}

// spare is a started spare, as its supervisor holds it.
type spare struct {
	pid  int
	done <-chan int
	ctl  *os.File // the supervisor's end of its socket
	// unmapped is set while a spare started ahead has no ids mapped in its
	// user namespace (Children.StartSpareAhead, AdoptSpare).
	unmapped bool
}

// discard lets a spare go, unused: closing its socket ends it, and the
// kill ends it even if it is stuck.
func (s *spare) discard() {
	s.ctl.Close()
	_ = unix.Kill(s.pid, unix.SIGKILL)
}

// SetProcessName sets the name ps shows of the process (its first 15
// bytes): its main thread's, which the calling goroutine need not run on
// (PR_SET_NAME names only the calling thread).
func SetProcessName(name string) {
	_ = os.WriteFile("/proc/self/comm", []byte(name), 0)
}

// maxSpareRequest bounds a request: a command and an environment the API
// admits (128 KiB of arguments, a 256 KiB policy) fit many times over.
const maxSpareRequest = 4 << 20

// ask hands the spare its command: the descriptors, then the request.
func (s *spare) ask(req spareRequest, files []*os.File) error {
	msg, err := json.Marshal(req)
	if err != nil {
		s.ctl.Close()
		return err
	}
	if err := fdpass.Send(s.ctl, files, msg); err != nil {
		return fmt.Errorf("hand the spare its command: %w", err)
	}
	return nil
}

// ExecSpare is a spare exec stage on descriptor spareFD: it waits for its
// request, takes its descriptors (stdio as 0, 1, ...; the report kept
// apart) and environment, and runs the command as Exec does. A spare
// started ahead (unmapped; Children.StartSpareAhead) first becomes the root
// of its user namespace, mapped by then. It returns the command it was
// given and, like Exec, returns only on failure.
func ExecSpare(spareFD int, dropCaps, unmapped bool) ([]string, error) {
	// Not dumpable while it waits: no process of the sandbox, root there
	// included, may read or write its memory through /proc and so run
	// code in it before the policy applies (exec makes the command
	// dumpable again).
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return nil, fmt.Errorf("spare: %w", err)
	}
	SetProcessName("corral-spare") // what ps shows until the command runs
	ctl := os.NewFile(uintptr(spareFD), "spare")
	defer ctl.Close()
	req, fds, err := receive(ctl)
	if err != nil {
		return nil, err
	}
	if req.Stdio < 0 || req.Stdio != len(fds)-1 {
		return req.Command, fmt.Errorf("spare: %d descriptors for %d stdio and a report", len(fds), req.Stdio)
	}
	report := os.NewFile(uintptr(fds[req.Stdio]), "report")
	unix.CloseOnExec(fds[req.Stdio])
	if unmapped {
		if err := becomeRoot(); err != nil {
			fmt.Fprintf(report, "error: spare: %v\n", err)
			return req.Command, err
		}
	}
	if err := enter(req); err != nil {
		fmt.Fprintf(report, "error: spare: %v\n", err)
		return req.Command, err
	}
	for i := 0; i < req.Stdio; i++ {
		if fds[i] == i {
			continue
		}
		if err := unix.Dup3(fds[i], i, 0); err != nil {
			return req.Command, fmt.Errorf("spare: descriptor %d: %w", i, err)
		}
		if fds[i] >= req.Stdio {
			unix.Close(fds[i])
		}
	}
	if req.TTY {
		// It leads a session of its own, without a terminal yet.
		if err := unix.IoctlSetInt(0, unix.TIOCSCTTY, 0); err != nil {
			return req.Command, fmt.Errorf("spare: take the terminal: %w", err)
		}
	}
	os.Clearenv()
	for _, kv := range req.Env {
		k, v, _ := strings.Cut(kv, "=")
		os.Setenv(k, v)
	}
	return req.Command, runStage(req.Command, report, dropCaps)
}

// becomeRoot makes a spare started ahead what a spare started for its
// sandbox is from its start: uid and gid 0 of its user namespace (the
// sandbox's first host ids), no supplementary group, no ambient
// capability. It fails if its supervisor has not mapped those ids.
func becomeRoot() error {
	if err := syscall.Setgroups(nil); err != nil {
		return fmt.Errorf("drop supplementary groups: %w", err)
	}
	if err := syscall.Setresgid(0, 0, 0); err != nil {
		return fmt.Errorf("become gid 0 of its user namespace: %w", err)
	}
	if err := syscall.Setresuid(0, 0, 0); err != nil {
		return fmt.Errorf("become uid 0 of its user namespace: %w", err)
	}
	// The command is exec'd from this thread, locked to it from now on;
	// the other threads' sets are cleared too where the build allows it
	// (a build with cgo cannot reach them: ENOTSUP).
	runtime.LockOSThread()
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	_, _, e := syscall.AllThreadsSyscall(unix.SYS_PRCTL, unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0)
	if e != 0 && e != syscall.ENOTSUP {
		return fmt.Errorf("clear ambient capabilities: %w", e)
	}
	return nil
}

// enter checks that the spare's root is the one req names and goes into
// req's working directory.
func enter(req spareRequest) error {
	root, err := rootOf("/")
	if err != nil {
		return err
	}
	if root != req.Root {
		return fmt.Errorf("its root (device %d, inode %d) is not the sandbox's (device %d, inode %d)", root.Dev, root.Ino, req.Root.Dev, req.Root.Ino)
	}
	if err := unix.Chdir(req.Dir); err != nil {
		return fmt.Errorf("chdir %s: %w", req.Dir, err)
	}
	return nil
}

// receive reads a request and its descriptors from ctl.
func receive(ctl *os.File) (spareRequest, []int, error) {
	var req spareRequest
	fds, msg, err := fdpass.Receive(ctl, maxSpareRequest)
	if errors.Is(err, fdpass.ErrNothing) {
		return req, nil, errors.New("spare: no request (its supervisor went away)")
	}
	if err != nil {
		return req, nil, fmt.Errorf("spare: %w", err)
	}
	if err := json.Unmarshal(msg, &req); err != nil {
		return req, nil, fmt.Errorf("spare: request: %w", err)
	}
	return req, fds, nil
}
