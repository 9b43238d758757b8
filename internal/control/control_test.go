package control

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/driver"
)

// serve answers each connection on a socket in a new directory with
// answer, and returns the socket's path.
func serve(t *testing.T, answer func(c *net.UnixConn, req Request, files []*os.File)) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "control.sock")
	ln, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.AcceptUnix()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				req, files, err := ReadRequest(c)
				if err != nil {
					return
				}
				answer(c, req, files)
			}()
		}
	}()
	return path
}

func TestListenIsOwnerOnly(t *testing.T) {
	path := serve(t, func(*net.UnixConn, Request, []*os.File) {})
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode %v; want a socket, 0600", fi.Mode())
	}
}

// Dial connects to the socket itself: not through a symlink (to a socket
// elsewhere), not to anything but a socket; a missing socket or one
// nobody listens on is ErrGone.
func TestDialOnlyASocket(t *testing.T) {
	target := serve(t, func(c *net.UnixConn, _ Request, files []*os.File) {
		CloseFiles(files)
		_ = WriteReply(c, Reply{State: "reached"})
	})
	dir := t.TempDir()
	link := filepath.Join(dir, "link.sock")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if c, err := Dial(link); err == nil {
		c.Close()
		t.Error("Dial followed a symlink to another socket")
	}
	file := filepath.Join(dir, "file.sock")
	os.WriteFile(file, nil, 0o600)
	if _, err := Dial(file); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("Dial of a regular file = %v; want not a socket", err)
	}
	if _, err := Dial(filepath.Join(dir, "missing.sock")); !errors.Is(err, ErrGone) {
		t.Errorf("Dial of nothing = %v; want ErrGone", err)
	}
	stale := filepath.Join(dir, "stale.sock")
	ln, err := Listen(stale)
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	if _, err := Dial(stale); !errors.Is(err, ErrGone) {
		t.Errorf("Dial of a socket nobody listens on = %v; want ErrGone", err)
	}
	c, err := Dial(target)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Send(Request{Op: OpStatus}); err != nil {
		t.Fatal(err)
	}
	if r, err := c.Recv(); err != nil || r.State != "reached" {
		t.Errorf("reply %+v, %v", r, err)
	}
}

// A reply is a sandbox's word: one longer than maxReply is an error, not
// memory; an error it sends is shown without control characters.
func TestRepliesAreBounded(t *testing.T) {
	huge := serve(t, func(c *net.UnixConn, _ Request, files []*os.File) {
		CloseFiles(files)
		line := append([]byte(`{"error":"`), bytes.Repeat([]byte("x"), 8*maxReply)...)
		_, _ = c.Write(append(line, "\"}\n"...))
	})
	c, err := Dial(huge)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Exec(context.Background(), c, "sb", driver.ExecOptions{Command: []string{"true"}, Stdout: new(bytes.Buffer), Stderr: new(bytes.Buffer)})
	if err == nil || !strings.Contains(err.Error(), "longer than") || len(err.Error()) > 2000 {
		t.Fatalf("a reply of 512 KiB: %.300v; want it refused as too long", err)
	}

	rude := serve(t, func(c *net.UnixConn, _ Request, files []*os.File) {
		CloseFiles(files)
		_ = WriteReply(c, Reply{Error: "no\x1b[2J\x07 way"})
	})
	if c, err = Dial(rude); err != nil {
		t.Fatal(err)
	}
	_, err = Exec(context.Background(), c, "sb", driver.ExecOptions{Command: []string{"true"}, Stdout: new(bytes.Buffer), Stderr: new(bytes.Buffer)})
	if err == nil || strings.ContainsAny(err.Error(), "\x1b\x07") || !strings.Contains(err.Error(), "way") {
		t.Errorf("error %q; want the sandbox's words without control characters", err)
	}
}

// An exec whose command has ended but whose output is still held open (a
// process left behind in the sandbox keeps stdout) returns when its
// caller's context ends.
func TestExecEndsWithItsCaller(t *testing.T) {
	held := make(chan []*os.File, 1)
	path := serve(t, func(c *net.UnixConn, _ Request, files []*os.File) {
		held <- files // stdout stays open here
		code := 0
		_ = WriteReply(c, Reply{PID: 1})
		_ = WriteReply(c, Reply{ExitCode: &code})
		_, _ = c.Read(make([]byte, 1))
	})
	c, err := Dial(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := Exec(ctx, c, "sb", driver.ExecOptions{Command: []string{"true"}, Stdout: new(bytes.Buffer), Stderr: new(bytes.Buffer)})
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Exec = %v; want its context's end", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Exec did not return when its caller's context ended")
	}
	CloseFiles(<-held)
}

// ServeExec and Exec together: the command's output, stdin and exit
// status cross the socket with the descriptors.
func TestExecRoundTrip(t *testing.T) {
	path := serve(t, func(c *net.UnixConn, req Request, files []*os.File) {
		ServeExec(c, req, files, func(req Request, stdio []*os.File) (int, <-chan int, func(), error) {
			done := make(chan int, 1)
			in, out := dup(t, stdio[0]), dup(t, stdio[1]) // the command's own copies: ServeExec closes stdio

			go func() {
				data, _ := io.ReadAll(in)
				out.Write(append([]byte(strings.Join(req.Command, " ")+":"), data...))
				out.Close()
				done <- 7
			}()
			return 42, done, func() {}, nil
		})
	})
	c, err := Dial(path)
	if err != nil {
		t.Fatal(err)
	}
	var stdout bytes.Buffer
	code, err := Exec(context.Background(), c, "sb", driver.ExecOptions{Command: []string{"cat", "-"}, Stdin: strings.NewReader("in"), Stdout: &stdout, Stderr: new(bytes.Buffer)})
	if err != nil || code != 7 || stdout.String() != "cat -:in" {
		t.Errorf("Exec = %d, %v, %q; want 7, nil, %q", code, err, stdout.String(), "cat -:in")
	}
}

func dup(t *testing.T, f *os.File) *os.File {
	fd, err := unix.Dup(int(f.Fd()))
	if err != nil {
		t.Error(err)
	}
	return os.NewFile(uintptr(fd), f.Name())
}

// Whoever may ask for an exec cannot ask for it under another policy: the
// supervisor's CORRAL_* variables come from the sandbox alone.
func TestExecEnvKeepsTheSupervisorsVariables(t *testing.T) {
	base := []string{"CORRAL_POLICY={\"version\":1}", "PATH=/bin", "TERM=dumb"}
	req := Request{TTY: true, Env: []string{"CORRAL_POLICY={}", "FOO=1", "CORRAL_IMAGE_USER=root", "PATH=/usr/bin"}}
	got := strings.Join(ExecEnv(base, req), " ")
	if want := `CORRAL_POLICY={"version":1} PATH=/usr/bin TERM=xterm FOO=1`; got != want {
		t.Errorf("ExecEnv = %s; want %s", got, want)
	}
}
