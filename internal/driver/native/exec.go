package native

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/driver/native/shim"
	"github.com/corral-sandbox/corral/internal/errdefs"
)

// running returns the object of a sandbox whose supervisor lives.
func (d *Driver) running(id string) (*object, error) {
	o, err := d.load(id)
	if err != nil {
		return nil, err
	}
	if live, err := alive(d.bundle(id, o.Generation)); err != nil || !live {
		return nil, errdefs.FailedPrecondition("sandbox %s is not running", id)
	}
	return o, nil
}

// Exec implements driver.Execer: the supervisor starts the command inside
// the sandbox's namespaces, through its exec stage, on stdio that this
// call passes it (a pipe each) or on a terminal of the sandbox, whose
// master it passes back.
func (d *Driver) Exec(ctx context.Context, id string, opts driver.ExecOptions) (int, error) {
	o, err := d.running(id)
	if err != nil {
		return 0, err
	}
	c, err := shim.Dial(d.socket(id, o.Generation))
	if err != nil {
		return 0, errdefs.FailedPrecondition("sandbox %s is not running: %v", id, err)
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() }) // the command is killed when the caller goes
	defer stop()

	var copies sync.WaitGroup
	copyOut := func(w io.Writer, r *os.File) {
		copies.Add(1)
		go func() {
			defer copies.Done()
			defer r.Close()
			_, _ = io.Copy(w, r) // a terminal's master ends with EIO once its replica is gone
		}()
	}
	req := shim.Request{Op: shim.OpExec, Command: opts.Command, TTY: opts.TTY,
		Rows: uint16(opts.Size.Rows), Cols: uint16(opts.Size.Cols)}
	var theirs []*os.File // the command's stdio, sent to the supervisor
	if !opts.TTY {
		stdin, err := stdinFor(opts.Stdin)
		if err != nil {
			return 0, err
		}
		theirs = append(theirs, stdin)
		for _, w := range []io.Writer{opts.Stdout, opts.Stderr} {
			r, wr, err := os.Pipe()
			if err != nil {
				shim.CloseFiles(theirs)
				return 0, fmt.Errorf("exec: %w", err)
			}
			widenPipe(r)
			theirs = append(theirs, wr)
			copyOut(w, r)
		}
	}
	err = c.Send(req, theirs...)
	shim.CloseFiles(theirs) // the supervisor has its own copies now
	if err != nil {
		return 0, fmt.Errorf("exec: %w", err)
	}
	r, master, err := c.RecvFiles()
	if err == nil && r.Error != "" {
		shim.CloseFiles(master)
		return 0, fmt.Errorf("exec %s: %s", opts.Command[0], r.Error)
	}
	if err == nil && opts.TTY {
		if len(master) != 1 {
			shim.CloseFiles(master)
			return 0, fmt.Errorf("exec %s: the supervisor sent no terminal", opts.Command[0])
		}
		go func() {
			for s := range opts.Resize {
				_ = pty.Setsize(master[0], &pty.Winsize{Rows: uint16(s.Rows), Cols: uint16(s.Cols)})
			}
		}()
		if opts.Stdin != nil {
			go func() { _, _ = io.Copy(master[0], opts.Stdin) }()
		}
		copyOut(opts.Stdout, master[0])
	}
	if err == nil {
		r, err = c.Recv()
	}
	if ctx.Err() != nil {
		return 0, ctx.Err()
	}
	if err != nil || r.ExitCode == nil {
		return 0, fmt.Errorf("sandbox %s stopped while %s ran", id, opts.Command[0])
	}
	copies.Wait()
	return *r.ExitCode, nil
}

// stdinFor returns the read end of a pipe fed from in, or /dev/null.
func stdinFor(in io.Reader) (*os.File, error) {
	if in == nil {
		return os.Open(os.DevNull)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("exec: %w", err)
	}
	widenPipe(w)
	go func() {
		// In pieces as large as the pipe: *os.File's ReadFrom would copy 32 KiB at a time.
		_, _ = io.CopyBuffer(struct{ io.Writer }{w}, in, make([]byte, pipeSize))
		w.Close()
	}()
	return r, nil
}

// pipeSize is the capacity asked for the pipes of an exec's stdio, so that
// a stream (a file copied in or out) moves in large pieces.
const pipeSize = 1 << 20

// widenPipe asks for a pipe of pipeSize; a smaller one still works.
func widenPipe(f *os.File) {
	_, _ = unix.FcntlInt(f.Fd(), unix.F_SETPIPE_SZ, pipeSize)
}

// logPoll is how often Logs looks for new output when it follows.
const logPoll = 100 * time.Millisecond

// Logs implements driver.LogReader with the newest incarnation's output.
func (d *Driver) Logs(ctx context.Context, id string, opts driver.LogOptions, stdout, stderr io.Writer) error {
	o, err := d.load(id)
	if err != nil {
		return err
	}
	b := d.bundle(id, o.Generation)
	streams := []*logStream{{path: b.Path(shim.StdoutFile), w: stdout}, {path: b.Path(shim.StderrFile), w: stderr}}
	for _, s := range streams {
		if err := s.start(opts.Tail); err != nil {
			return err
		}
		defer s.close()
	}
	for {
		live, _ := alive(b)
		for _, s := range streams {
			if err := s.copy(); err != nil {
				return err
			}
		}
		if !opts.Follow || !live {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(logPoll):
		}
	}
}

// logStream is one output file that Logs copies, in two parts once the
// supervisor has rotated it (path+shim.RotatedSuffix, then path).
type logStream struct {
	path string
	w    io.Writer
	f    *os.File
}

// start writes the last tail lines kept (all for 0), previous part first,
// and opens the current part at its end, to follow it.
func (s *logStream) start(tail int) error {
	prev, err := os.ReadFile(s.path + shim.RotatedSuffix)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	f, err := os.Open(s.path)
	if errors.Is(err, os.ErrNotExist) {
		return nil // nothing printed yet
	}
	if err != nil {
		return err
	}
	s.f = f
	cur, err := io.ReadAll(f)
	if err != nil {
		return err
	}
	data := append(prev, cur...)
	if tail > 0 {
		data = data[tailOffset(data, tail):]
	}
	_, err = s.w.Write(data)
	return err
}

// tailOffset is where the last n lines of data begin.
func tailOffset(data []byte, n int) int {
	end := len(data)
	if end > 0 && data[end-1] == '\n' {
		end--
	}
	for ; n > 0; n-- {
		i := bytes.LastIndexByte(data[:end], '\n')
		if i < 0 {
			return 0
		}
		end = i
	}
	return end + 1
}

// copy writes what was added to the file since the last copy; when the
// supervisor has rotated it meanwhile, the rest of the old part and then
// the new part.
func (s *logStream) copy() error {
	if s.f == nil {
		f, err := os.Open(s.path)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		s.f = f
	}
	if err := s.drain(); err != nil {
		return err
	}
	cur, err := os.Stat(s.path)
	old, oerr := s.f.Stat()
	if err != nil || oerr != nil || os.SameFile(cur, old) {
		return nil
	}
	f, err := os.Open(s.path) // rotated: one rotation a call, the next call takes the rest
	if err != nil {
		return nil
	}
	s.f.Close()
	s.f = f
	return s.drain()
}

// drain writes what the open part holds past the last copy.
func (s *logStream) drain() error {
	if _, err := io.Copy(s.w, bufio.NewReader(s.f)); err != nil && !errors.Is(err, syscall.EIO) {
		return err
	}
	return nil
}

func (s *logStream) close() {
	if s.f != nil {
		s.f.Close()
	}
}
