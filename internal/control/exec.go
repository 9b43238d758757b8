package control

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"unicode"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/driver"
)

// Starter starts an exec's command on stdio (the caller's three files, or
// a terminal's replica three times) and returns its pid, its end (the exit
// status) and how to kill it.
type Starter func(req Request, stdio []*os.File) (pid int, done <-chan int, kill func(), err error)

// ServeExec answers an exec request on c: it starts the command with
// start, replies its pid (with a TTY, the terminal's master with it), then
// its exit status; the command is killed if the caller goes away before it
// ends.
func ServeExec(c *net.UnixConn, req Request, files []*os.File, start Starter) {
	defer CloseFiles(files)
	stdio, master, err := execStdio(req, files)
	if err != nil {
		_ = WriteReply(c, Reply{Error: err.Error()})
		return
	}
	pid, done, kill, err := start(req, stdio)
	CloseFiles(stdio) // the command has its own copies
	if err != nil {
		CloseFiles(master)
		_ = WriteReply(c, Reply{Error: err.Error()})
		return
	}
	_ = WriteReply(c, Reply{PID: pid}, master...)
	CloseFiles(master)
	gone := make(chan struct{})
	go func() { // the caller closes the connection: kill the command
		_, _ = io.Copy(io.Discard, c)
		close(gone)
	}()
	select {
	case code := <-done:
		_ = WriteReply(c, Reply{ExitCode: &code})
	case <-gone:
		kill()
		<-done
	}
}

// ExecEnv is an exec's environment: base, what the request adds or
// changes, and the terminal's type when it runs on one, each name once (a
// cold exec stage takes a name's first value, a spare its last). Variables
// named CORRAL_* are the supervisor's alone (the sandbox's policy, its
// image's user: what the exec stage applies): a request's are dropped,
// else whoever may ask for an exec could ask for it under a policy of its
// own.
func ExecEnv(base []string, req Request) []string {
	env := append([]string{}, base...)
	at := map[string]int{}
	for i, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		at[name] = i
	}
	set := func(kv string) {
		name, _, _ := strings.Cut(kv, "=")
		if i, ok := at[name]; ok {
			env[i] = kv
			return
		}
		at[name] = len(env)
		env = append(env, kv)
	}
	for _, kv := range req.Env {
		if !strings.HasPrefix(kv, reservedEnvPrefix) {
			set(kv)
		}
	}
	if req.TTY {
		set("TERM=xterm")
	}
	return env
}

// reservedEnvPrefix names the variables of the supervisor (ExecEnv).
const reservedEnvPrefix = "CORRAL_"

// execStdio returns the stdio of an exec: the caller's three files, or a
// new terminal's replica three times and its master.
func execStdio(req Request, files []*os.File) (stdio, master []*os.File, err error) {
	if len(req.Command) == 0 {
		return nil, nil, errors.New("exec needs a command")
	}
	if !req.TTY {
		if len(files) != 3 {
			return nil, nil, errors.New("exec needs its stdin, stdout and stderr")
		}
		return files, nil, nil
	}
	ptm, pts, err := pty.Open()
	if err != nil {
		return nil, nil, fmt.Errorf("open a terminal: %w", err)
	}
	if req.Rows > 0 && req.Cols > 0 {
		_ = pty.Setsize(ptm, &pty.Winsize{Rows: req.Rows, Cols: req.Cols})
	}
	return []*os.File{pts, pts, pts}, []*os.File{ptm}, nil
}

// Exec runs opts.Command through the supervisor at the other end of c,
// which it closes, and returns the command's exit status. The command is
// killed when ctx ends. A sandbox that stops while it runs is an error
// naming id.
func Exec(ctx context.Context, c *Conn, id string, opts driver.ExecOptions) (int, error) {
	defer c.Close()
	var (
		copies sync.WaitGroup
		mu     sync.Mutex
		reads  []*os.File // closed when ctx ends: a process left in the sandbox may hold the other ends
	)
	// When the caller goes, the command is killed (the connection closes)
	// and the copies of its output end.
	defer context.AfterFunc(ctx, func() {
		c.Close()
		mu.Lock()
		defer mu.Unlock()
		CloseFiles(reads)
	})()
	copyOut := func(w io.Writer, r *os.File) {
		mu.Lock()
		reads = append(reads, r)
		mu.Unlock()
		copies.Add(1)
		go func() {
			defer copies.Done()
			defer r.Close()
			_, _ = io.Copy(w, r) // a terminal's master ends with EIO once its replica is gone
		}()
	}
	req := Request{Op: OpExec, Command: opts.Command, TTY: opts.TTY,
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
				CloseFiles(theirs)
				return 0, fmt.Errorf("exec: %w", err)
			}
			widenPipe(r)
			theirs = append(theirs, wr)
			copyOut(w, r)
		}
	}
	err := c.Send(req, theirs...)
	CloseFiles(theirs) // the supervisor has its own copies now
	if err != nil {
		return 0, fmt.Errorf("exec: %w", err)
	}
	r, master, err := c.RecvFiles()
	if err == nil && r.Error != "" {
		CloseFiles(master)
		return 0, fmt.Errorf("exec %s: %s", opts.Command[0], Printable(r.Error))
	}
	if err == nil && opts.TTY {
		if len(master) != 1 {
			CloseFiles(master)
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
	} else {
		CloseFiles(master)
	}
	if err == nil {
		r, err = c.Recv()
	}
	if ctx.Err() != nil {
		return 0, ctx.Err()
	}
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
		return 0, fmt.Errorf("exec %s in sandbox %s: %w", opts.Command[0], id, err)
	}
	if err != nil || r.ExitCode == nil {
		return 0, fmt.Errorf("sandbox %s stopped while %s ran", id, opts.Command[0])
	}
	copied := make(chan struct{})
	go func() { copies.Wait(); close(copied) }()
	select {
	case <-copied:
	case <-ctx.Done(): // the copies end: their files are closed
		return 0, ctx.Err()
	}
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

// Printable is what a sandbox said (a report, an error it sent), fit to
// show in an error: valid UTF-8, no control character, 1,000 bytes at most.
func Printable(s string) string {
	if len(s) > 1000 {
		s = s[:1000] + "…"
	}
	s = strings.ToValidUTF8(strings.TrimSpace(s), "\uFFFD")
	return strings.Map(func(r rune) rune {
		if unicode.IsPrint(r) {
			return r
		}
		return ' '
	}, s)
}
