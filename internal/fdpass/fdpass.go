// Package fdpass hands open descriptors and a message to another process
// over a Unix stream socket, in one direction, once: the descriptors first
// (SCM_RIGHTS, with one byte), then the message, ended by closing the
// socket. The native supervisor's spares and standbys are handed their
// work this way.
package fdpass

import (
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// maxFiles bounds the descriptors Receive takes.
const maxFiles = 64

// Send sends files and then msg on conn, and closes conn.
func Send(conn *os.File, files []*os.File, msg []byte) error {
	defer conn.Close()
	if err := sendFiles(conn, files); err != nil {
		return fmt.Errorf("send descriptors: %w: %w", ErrNotSent, err)
	}
	_, err := conn.Write(msg)
	return err
}

// sendFiles sends files with one byte.
func sendFiles(conn *os.File, files []*os.File) error {
	fds := make([]int, len(files))
	for i, f := range files {
		fds[i] = int(f.Fd())
	}
	if len(fds) > maxFiles {
		return fmt.Errorf("%d descriptors: at most %d", len(fds), maxFiles)
	}
	raw, err := conn.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := raw.Write(func(fd uintptr) bool {
		serr = unix.Sendmsg(int(fd), []byte{0}, unix.UnixRights(fds...), nil, unix.MSG_NOSIGNAL)
		return serr != unix.EAGAIN
	}); err != nil {
		return err
	}
	return serr
}

// ErrNotSent is in Send's error when nothing reached the receiver (it
// is gone, say); any other error of Send may leave it with a part.
var ErrNotSent = errors.New("nothing was sent")

// ErrNothing is Receive's error when the sender closed its end without
// sending anything.
var ErrNothing = errors.New("nothing was sent (the sender went away)")

// Receive waits for what Send sends on conn: the descriptors (close on
// exec) and the message, which may be at most limit bytes.
func Receive(conn *os.File, limit int64) ([]int, []byte, error) {
	raw, err := conn.SyscallConn()
	if err != nil {
		return nil, nil, err
	}
	oob := make([]byte, unix.CmsgSpace(maxFiles*4))
	var n, oobn int
	var rerr error
	if err := raw.Read(func(fd uintptr) bool {
		n, oobn, _, _, rerr = unix.Recvmsg(int(fd), make([]byte, 1), oob, unix.MSG_CMSG_CLOEXEC)
		return rerr != unix.EAGAIN
	}); err != nil {
		return nil, nil, err
	}
	if rerr != nil {
		return nil, nil, rerr
	}
	if n != 1 {
		return nil, nil, ErrNothing
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	var fds []int
	for _, m := range msgs {
		rights, rerr := unix.ParseUnixRights(&m)
		err = errors.Join(err, rerr)
		fds = append(fds, rights...)
	}
	if err != nil {
		closeAll(fds)
		return nil, nil, fmt.Errorf("descriptors: %w", err)
	}
	msg, err := io.ReadAll(io.LimitReader(conn, limit+1))
	if err == nil && int64(len(msg)) > limit {
		err = fmt.Errorf("a message of more than %d bytes", limit)
	}
	if err != nil {
		closeAll(fds)
		return nil, nil, err
	}
	return fds, msg, nil
}

func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}
