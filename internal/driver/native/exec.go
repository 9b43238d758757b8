package native

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"syscall"
	"time"

	"github.com/corral-sandbox/corral/internal/control"
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
	c, err := control.Dial(d.socket(id, o.Generation))
	if err != nil {
		return 0, errdefs.FailedPrecondition("sandbox %s is not running: %v", id, err)
	}
	return control.Exec(ctx, c, id, opts)
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
