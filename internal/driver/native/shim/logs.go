package shim

import (
	"errors"
	"io"
	"os"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// RotatedSuffix names the previous part of a rotated output file
// ("stdout.1").
const RotatedSuffix = ".1"

// rotatingLog keeps what one output stream of the main process printed in
// a file of the bundle, in at most two parts of max/2 bytes each: the
// current file and, once it is full, the previous one (RotatedSuffix). The
// main process writes into a pipe, never into the file, so nothing it does
// can make the file grow past its cap.
type rotatingLog struct {
	dir  int    // the bundle's descriptor: after the pivot it has no path
	name string // StdoutFile or StderrFile
	max  int64  // both parts together
	f    *os.File
	size int64
}

// newRotatingLog opens (appending to) the output file name in dir.
func newRotatingLog(dir int, name string, max int64) (*rotatingLog, error) {
	l := &rotatingLog{dir: dir, name: name, max: max}
	if err := l.open(); err != nil {
		return nil, err
	}
	return l, nil
}

func (l *rotatingLog) open() error {
	fd, err := unix.Openat(l.dir, l.name, unix.O_WRONLY|unix.O_CREAT|unix.O_APPEND|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return &os.PathError{Op: "open", Path: l.name, Err: err}
	}
	l.f = os.NewFile(uintptr(fd), l.name)
	fi, err := l.f.Stat()
	if err != nil {
		return err
	}
	l.size = fi.Size()
	return nil
}

// Write appends p, rotating first when the current part would pass max/2.
func (l *rotatingLog) Write(p []byte) (int, error) {
	part := max(l.max/2, 1)
	written := 0
	for len(p) > 0 {
		if l.size >= part {
			if err := l.rotate(); err != nil {
				return written, err
			}
		}
		n := int(min(int64(len(p)), part-l.size))
		m, err := l.f.Write(p[:n])
		written += m
		l.size += int64(m)
		if err != nil {
			return written, err
		}
		p = p[n:]
	}
	return written, nil
}

// rotate makes the current part the previous one and starts a new one.
// The current part's name never goes missing: a reader always finds it.
func (l *rotatingLog) rotate() error {
	l.f.Close()
	prev, next := l.name+RotatedSuffix, l.name+".new"
	if err := unix.Unlinkat(l.dir, prev, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return err
	}
	if err := unix.Linkat(l.dir, l.name, l.dir, prev, 0); err != nil {
		return err
	}
	fd, err := unix.Openat(l.dir, next, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	unix.Close(fd)
	if err := unix.Renameat(l.dir, next, l.dir, l.name); err != nil {
		return err
	}
	return l.open()
}

// copyOutput copies what the main process writes to r into l until every
// writer is gone; done is marked then.
func copyOutput(r *os.File, l *rotatingLog, done *sync.WaitGroup) {
	defer done.Done()
	defer r.Close()
	defer l.f.Close()
	_, _ = io.Copy(l, r)
}

// LastLine returns ": " and the last line of a log file, or nothing.
func LastLine(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if last := strings.TrimSpace(lines[len(lines)-1]); last != "" {
		return ": " + last
	}
	return ""
}
