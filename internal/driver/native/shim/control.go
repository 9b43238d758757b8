package shim

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

// The control protocol between the gateway and a native sandbox's
// supervisor: one JSON request per connection, answered by JSON replies.
// The connection stays open until the supervisor exits, so a client learns
// that the supervisor is gone from the end of the stream.

// The requests.
const (
	OpStatus = "status" // reply: Reply{State, MainPID}
	OpStop   = "stop"   // reply: Reply{State: "stopping"}, then the end of the stream
	OpExec   = "exec"   // with the command's stdio as SCM_RIGHTS, or TTY; reply: Reply{PID} (with a TTY, its terminal's master as SCM_RIGHTS), then Reply{ExitCode}
	OpWait   = "wait"   // no reply; the stream ends when the supervisor exits
)

// The states a supervisor reports.
const (
	StateRunning  = "running"
	StateStopping = "stopping"
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
}

// Reply is a control reply.
type Reply struct {
	State    string `json:"state,omitempty"`
	MainPID  int    `json:"main_pid,omitempty"`
	PID      int    `json:"pid,omitempty"`
	ExitCode *int   `json:"exit_code,omitempty"`
	Error    string `json:"error,omitempty"`
}

// maxSocketPath is the longest path a sockaddr_un holds.
const maxSocketPath = 107

// inDir runs fn with a path to name in dir that fits a socket address:
// dir's own path when short enough, else a path through /proc/self/fd.
func inDir(dir, name string, fn func(path string) error) error {
	path := filepath.Join(dir, name)
	if len(path) <= maxSocketPath {
		return fn(path)
	}
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(fd)
	return fn(fmt.Sprintf("/proc/self/fd/%d/%s", fd, name))
}

// Listen listens on the control socket at path, replacing a stale file.
func Listen(path string) (*net.UnixListener, error) {
	var l *net.UnixListener
	err := inDir(filepath.Dir(path), filepath.Base(path), func(p string) error {
		_ = os.Remove(path)
		addr := &net.UnixAddr{Name: p, Net: "unix"}
		var err error
		l, err = net.ListenUnix("unix", addr)
		return err
	})
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

// Dial connects to the control socket at path.
func Dial(path string) (*Conn, error) {
	var c *net.UnixConn
	err := inDir(filepath.Dir(path), filepath.Base(path), func(p string) error {
		var err error
		c, err = net.DialUnix("unix", nil, &net.UnixAddr{Name: p, Net: "unix"})
		return err
	})
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", path, ErrGone)
	}
	if err != nil {
		return nil, err
	}
	return &Conn{c: c, r: bufio.NewReader(c)}, nil
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
	c.r = bufio.NewReader(io.MultiReader(bytes.NewReader(rest), c.c))
	if !found {
		more, err := c.r.ReadBytes('\n')
		if err != nil {
			CloseFiles(files)
			return r, nil, err
		}
		line = append(line, more...)
	}
	if err := json.Unmarshal(line, &r); err != nil {
		CloseFiles(files)
		return r, nil, fmt.Errorf("control reply %q: %w", line, err)
	}
	return r, files, nil
}

// Recv reads the next reply; io.EOF means the supervisor has exited.
func (c *Conn) Recv() (Reply, error) {
	var r Reply
	line, err := c.r.ReadBytes('\n')
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(line, &r); err != nil {
		return r, fmt.Errorf("control reply %q: %w", line, err)
	}
	return r, nil
}

// SetDeadline bounds the exchange.
func (c *Conn) SetDeadline(t time.Time) error { return c.c.SetDeadline(t) }

// Close closes the connection.
func (c *Conn) Close() error { return c.c.Close() }

// readRequest reads one request and the files sent with it.
func readRequest(c *net.UnixConn) (Request, []*os.File, error) {
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
// stderr).
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

// writeReply sends one reply, with files as SCM_RIGHTS.
func writeReply(c *net.UnixConn, r Reply, files ...*os.File) error {
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return writeMsg(c, append(data, '\n'), files)
}
