// Package control is the protocol between the gateway and a sandbox's
// supervisor over a Unix socket (a native sandbox's, and a Docker
// container's PID 1), and the exec both serve on it: the supervisor
// starts the command inside the sandbox, on stdio the gateway passes it
// (SCM_RIGHTS) or on a terminal of the sandbox whose master it passes back.
//
// One JSON request per connection, answered by JSON replies. The
// connection stays open until the supervisor exits, so a client learns
// that the supervisor is gone from the end of the stream. A client treats
// what comes back as a sandbox's words: a Docker container's root can
// replace the socket with one of its own, so replies are bounded and
// Dial connects only to a socket, never through a symlink.
package control

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The requests.
const (
	OpStatus = "status" // reply: Reply{State, MainPID}
	OpStop   = "stop"   // reply: Reply{State: "stopping"}, then the end of the stream
	OpExec   = "exec"   // with the command's stdio as SCM_RIGHTS, or TTY; reply: Reply{PID} (with a TTY, its terminal's master as SCM_RIGHTS), then Reply{ExitCode}
	OpWait   = "wait"   // no reply; the stream ends when the supervisor exits
	// OpCheckpoint: reply Reply{State: "checkpointed", Path} once the
	// memory image is in Path (the supervisor's own, until the restore)
	// and the sandbox's processes are stopped;
	// they are restored from it in place when the caller writes a line or
	// goes away, then Reply{State: "running"} (or Error). With Pause, they
	// stay checkpointed out, whatever becomes of the caller, until
	// OpResume or a stop.
	OpCheckpoint = "checkpoint"
	// OpResume restores the processes a pause holds checkpointed out;
	// reply Reply{State: "running"} once they run (or Error), at once when
	// none are held.
	OpResume = "resume"
)

// The states a supervisor reports.
const (
	StateRunning  = "running"
	StateStopping = "stopping"
	// StateCheckpointed: the memory image is written, the processes
	// stopped until the caller lets them go on.
	StateCheckpointed = "checkpointed"
)

// Request is a control request.
type Request struct {
	Op string `json:"op"`
	// Stop
	TimeoutMillis int64 `json:"timeout_ms,omitempty"`
	Force         bool  `json:"force,omitempty"`
	// Exec; the stdio descriptors come with the request (one with TTY).
	Command []string `json:"command,omitempty"`
	TTY     bool     `json:"tty,omitempty"`
	Rows    uint16   `json:"rows,omitempty"`
	Cols    uint16   `json:"cols,omitempty"`
	Env     []string `json:"env,omitempty"`
	// Checkpoint: a pause's, held until OpResume (see OpCheckpoint).
	Pause bool `json:"pause,omitempty"`
}

// Reply is a control reply.
type Reply struct {
	State    string `json:"state,omitempty"`
	MainPID  int    `json:"main_pid,omitempty"`
	PID      int    `json:"pid,omitempty"`
	ExitCode *int   `json:"exit_code,omitempty"`
	Error    string `json:"error,omitempty"`
	// Checkpoint: the host directory of the memory image.
	Path string `json:"path,omitempty"`
}

// maxSocketPath is the longest path a sockaddr_un holds.
const maxSocketPath = 107

// maxReply bounds a reply line: a supervisor's replies are a few dozen
// bytes, and one a workload wrote must not grow the gateway's memory.
const maxReply = 64 << 10

// Listen listens on the socket at path, replacing a stale file. Only its
// owner may connect (mode 0600): a sandbox's workload runs as another user.
func Listen(path string) (*net.UnixListener, error) {
	dir, name := filepath.Dir(path), filepath.Base(path)
	at := path
	if len(path) > maxSocketPath {
		fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, &os.PathError{Op: "open", Path: dir, Err: err}
		}
		defer unix.Close(fd)
		at = fmt.Sprintf("/proc/self/fd/%d/%s", fd, name)
	}
	_ = os.Remove(path)
	old := unix.Umask(0o177) // no moment when others could connect
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: at, Net: "unix"})
	unix.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	l.SetUnlinkOnClose(false) // the gateway removes it with the bundle
	return l, nil
}

// Conn is a client's connection to a supervisor.
type Conn struct {
	c *net.UnixConn
	r *bufio.Reader
}

// ErrGone is returned by Dial when no supervisor listens on the socket.
var ErrGone = errors.New("no supervisor listens")

// Dial connects to the socket at path: to the socket file itself, opened
// without following a symlink (in a directory a sandbox can write, a
// symlink could point the gateway at a socket of the host).
func Dial(path string) (*Conn, error) {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil, fmt.Errorf("%s: %w", path, ErrGone)
	}
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return nil, fmt.Errorf("%s is not a socket", path)
	}
	// Through the descriptor: the inode just checked, whatever the path
	// names now, and a short address whatever the path's length.
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: fmt.Sprintf("/proc/self/fd/%d", fd), Net: "unix"})
	if errors.Is(err, syscall.ECONNREFUSED) {
		return nil, fmt.Errorf("%s: %w", path, ErrGone)
	}
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", path, err)
	}
	return &Conn{c: c, r: bufio.NewReaderSize(c, maxReply)}, nil
}

// Send sends a request, with files passed as SCM_RIGHTS.
func (c *Conn) Send(req Request, files ...*os.File) error {
	data, err := json.Marshal(req)
	if err != nil {
		return err
	}
	return writeMsg(c.c, append(data, '\n'), files)
}

// RecvFiles reads the first reply with the files sent along with it. It
// must come before any Recv.
func (c *Conn) RecvFiles() (Reply, []*os.File, error) {
	var r Reply
	buf := make([]byte, 4096)
	n, files, err := readMsg(c.c, buf)
	if err != nil {
		return r, nil, err
	}
	line, rest, found := bytes.Cut(buf[:n], []byte("\n"))
	c.r = bufio.NewReaderSize(io.MultiReader(bytes.NewReader(rest), c.c), maxReply)
	if !found {
		more, err := c.readLine()
		if err != nil {
			CloseFiles(files)
			return r, nil, err
		}
		line = append(line, more...)
	}
	if err := parseReply(line, &r); err != nil {
		CloseFiles(files)
		return r, nil, err
	}
	return r, files, nil
}

// Recv reads the next reply; io.EOF means the supervisor has exited.
func (c *Conn) Recv() (Reply, error) {
	var r Reply
	line, err := c.readLine()
	if err != nil {
		return r, err
	}
	return r, parseReply(line, &r)
}

// readLine reads up to the next newline, maxReply bytes at most.
func (c *Conn) readLine() ([]byte, error) {
	line, err := c.r.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		return nil, fmt.Errorf("a control reply longer than %d bytes", maxReply)
	}
	return line, err
}

func parseReply(line []byte, r *Reply) error {
	if len(line) > maxReply {
		return fmt.Errorf("a control reply longer than %d bytes", maxReply)
	}
	if err := json.Unmarshal(line, r); err != nil {
		return fmt.Errorf("control reply %.200q: %w", line, err)
	}
	return nil
}

// SetDeadline bounds the exchange.
func (c *Conn) SetDeadline(t time.Time) error { return c.c.SetDeadline(t) }

// Close closes the connection.
func (c *Conn) Close() error { return c.c.Close() }

// ReadRequest reads one request and the files sent with it.
func ReadRequest(c *net.UnixConn) (Request, []*os.File, error) {
	var req Request
	buf := make([]byte, 64<<10)
	n, files, err := readMsg(c, buf)
	if err != nil {
		return req, nil, err
	}
	if err := json.Unmarshal(buf[:n], &req); err != nil {
		CloseFiles(files)
		return req, nil, fmt.Errorf("control request: %w", err)
	}
	return req, files, nil
}

// maxFiles is the most descriptors one message carries (stdin, stdout,
// stderr); the kernel closes any beyond them.
const maxFiles = 3

// readMsg reads one message into buf, and the files sent with it.
func readMsg(c *net.UnixConn, buf []byte) (int, []*os.File, error) {
	oob := make([]byte, unix.CmsgSpace(4*maxFiles))
	n, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		return 0, nil, err
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil {
		return 0, nil, err
	}
	var files []*os.File
	for _, m := range msgs {
		fds, err := unix.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			unix.CloseOnExec(fd)
			files = append(files, os.NewFile(uintptr(fd), "passed"))
		}
	}
	return n, files, nil
}

// writeMsg writes data, with files as SCM_RIGHTS.
func writeMsg(c *net.UnixConn, data []byte, files []*os.File) error {
	var oob []byte
	if len(files) > 0 {
		fds := make([]int, len(files))
		for i, f := range files {
			fds[i] = int(f.Fd())
		}
		oob = unix.UnixRights(fds...)
	}
	_, _, err := c.WriteMsgUnix(data, oob, nil)
	return err
}

// CloseFiles closes every file of files.
func CloseFiles(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}

// WriteReply sends one reply, with files as SCM_RIGHTS.
func WriteReply(c *net.UnixConn, r Reply, files ...*os.File) error {
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return writeMsg(c, append(data, '\n'), files)
}
