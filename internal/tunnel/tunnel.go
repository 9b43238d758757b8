// Package tunnel joins two byte streams whose directions end on their own
// (TCP half-close): a TCP connection and a PortForward call's stream of
// frames (port-forward, on both the CLI's and the gateway's side), or two
// TCP connections (an exposed port).
package tunnel

import (
	"errors"
	"io"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
)

// Side is one end of a tunnel: *net.TCPConn is one, and so is *Frames.
type Side interface {
	io.ReadWriter
	// CloseWrite tells the other end that no more bytes come; reading
	// goes on.
	CloseWrite() error
}

// Join copies a's bytes to b and b's to a. Each direction ends when its
// source ends (then the destination is half-closed) and Join returns nil
// once both have; at the first error it returns that error at once, and
// the caller closes both sides, which ends the other direction. A write
// that meets io.EOF (a gRPC client stream that the gateway ended) is not
// that error: the other direction's read, which ends too, says why.
func Join(a, b Side) error {
	done := make(chan error, 2)
	pipe := func(dst, src Side) {
		_, err := io.Copy(dst, src)
		if err == nil {
			err = dst.CloseWrite()
		}
		done <- err
	}
	go pipe(a, b)
	go pipe(b, a)
	var ended error
	for range 2 {
		switch err := <-done; {
		case errors.Is(err, io.EOF):
			ended = err
		case err != nil:
			return err
		}
	}
	return ended
}

// Frames is a PortForward stream seen as a Side, on either end of the
// call.
type Frames struct {
	// Send and Recv are the stream's.
	Send func(*corralv1.PortForwardFrame) error
	Recv func() (*corralv1.PortForwardFrame, error)
	// CloseSend half-closes the caller's side (the client stream's
	// CloseSend); nil on the gateway's side, which sends a close_write
	// frame instead, since its call ends only when it returns.
	CloseSend func() error

	rest []byte // what a frame held beyond the last Read
	eof  bool   // a close_write frame came
}

// Read returns the data of the frames received, and io.EOF after a
// close_write frame or the end of the stream.
func (f *Frames) Read(p []byte) (int, error) {
	for len(f.rest) == 0 {
		if f.eof {
			return 0, io.EOF
		}
		frame, err := f.Recv()
		if err != nil {
			return 0, err
		}
		f.rest, f.eof = frame.GetData(), frame.GetCloseWrite()
	}
	n := copy(p, f.rest)
	f.rest = f.rest[n:]
	return n, nil
}

// Write sends a copy of p as one data frame (a sent message must not
// change afterwards).
func (f *Frames) Write(p []byte) (int, error) {
	if err := f.Send(&corralv1.PortForwardFrame{Data: append([]byte(nil), p...)}); err != nil {
		return 0, err
	}
	return len(p), nil
}

// CloseWrite tells the other end of the call that no more data comes.
func (f *Frames) CloseWrite() error {
	if f.CloseSend != nil {
		return f.CloseSend()
	}
	return f.Send(&corralv1.PortForwardFrame{CloseWrite: true})
}
