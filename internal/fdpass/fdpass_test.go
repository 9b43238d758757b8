package fdpass

import (
	"errors"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func socketpair(t *testing.T) (*os.File, *os.File) {
	t.Helper()
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	return os.NewFile(uintptr(pair[0]), "a"), os.NewFile(uintptr(pair[1]), "b")
}

// What is sent arrives: descriptors that reach the same open files, and
// the message whole.
func TestSendReceive(t *testing.T) {
	a, b := socketpair(t)
	defer b.Close()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	msg := strings.Repeat("m", 300<<10) // more than a socket buffer
	sent := make(chan error, 1)
	go func() { sent <- Send(a, []*os.File{w, r}, []byte(msg)) }()
	fds, got, err := Receive(b, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	w.Close()
	if len(fds) != 2 || string(got) != msg {
		t.Fatalf("received %d descriptors and %d bytes; want 2 and %d", len(fds), len(got), len(msg))
	}
	if flags, err := unix.FcntlInt(uintptr(fds[0]), unix.F_GETFD, 0); err != nil || flags&unix.FD_CLOEXEC == 0 {
		t.Errorf("a received descriptor is not closed on exec: %#x, %v", flags, err)
	}
	theirW, theirR := os.NewFile(uintptr(fds[0]), "w"), os.NewFile(uintptr(fds[1]), "r")
	defer theirR.Close()
	if _, err := theirW.WriteString("through"); err != nil {
		t.Fatal(err)
	}
	theirW.Close()
	buf := make([]byte, 16)
	if n, err := r.Read(buf); err != nil || string(buf[:n]) != "through" {
		t.Errorf("read %q, %v through the received write end; want %q", buf[:n], err, "through")
	}
}

// A sender gone without a word, and a message past the limit, are errors.
func TestReceiveRefuses(t *testing.T) {
	a, b := socketpair(t)
	a.Close()
	if _, _, err := Receive(b, 10); !errors.Is(err, ErrNothing) {
		t.Errorf("from a closed sender: %v; want ErrNothing", err)
	}
	b.Close()
	a, b = socketpair(t)
	defer b.Close()
	go Send(a, nil, []byte("eleven byte"))
	if _, _, err := Receive(b, 10); err == nil || !strings.Contains(err.Error(), "more than 10 bytes") {
		t.Errorf("an 11-byte message with a limit of 10: %v; want it refused", err)
	}
}

// A receiver gone before anything was sent is ErrNotSent: the sender
// knows that nothing of its handoff arrived.
func TestSendToNobody(t *testing.T) {
	a, b := socketpair(t)
	b.Close()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if err := Send(a, []*os.File{w}, []byte("x")); !errors.Is(err, ErrNotSent) || !errors.Is(err, unix.EPIPE) {
		t.Errorf("to a closed receiver: %v; want ErrNotSent (EPIPE)", err)
	}
}
