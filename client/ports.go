package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"

	"google.golang.org/grpc/status"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
	"github.com/corral-sandbox/corral/internal/tunnel"
)

// HalfCloser is a connection whose directions end on their own
// (*net.TCPConn and *net.UnixConn are ones): a client that closes its
// writing side still reads the answer.
type HalfCloser interface {
	net.Conn
	CloseWrite() error
	CloseRead() error
}

// Forward carries conn to 127.0.0.1:port inside a ready sandbox, through
// the gateway, until both directions have ended or ctx ends; each
// direction's end is passed on (TCP half-close). The sandbox's network
// policy does not apply: this is no egress.
func (c *Client) Forward(ctx context.Context, name string, port int, conn HalfCloser) error {
	ctx, cancel := context.WithCancel(ctx) // ends the call however the connection ends
	defer cancel()
	stream, err := c.PortForward(ctx)
	if err != nil {
		return c.Explain(err)
	}
	if err := stream.Send(&corralv1.PortForwardFrame{Name: name, Port: int32(port)}); err != nil {
		_, err = stream.Recv() // the call's own error
		return c.Explain(err)
	}
	err = tunnel.Join(conn, &tunnel.Frames{Send: stream.Send, Recv: stream.Recv, CloseSend: stream.CloseSend})
	var call interface{ GRPCStatus() *status.Status }
	if errors.As(err, &call) { // the gateway's answer, without the local copy's wrapping
		return c.Explain(call.GRPCStatus().Err())
	}
	return err
}

// DialPort connects to 127.0.0.1:port inside a ready sandbox, through the
// gateway (see Forward). The connection is one end of a local socket pair
// whose other end Forward carries: closing it ends the forwarding. A
// forwarding that fails (the sandbox is not ready, nothing listens on the
// port) ends the connection, and its Read returns the gateway's reason.
func (c *Client) DialPort(ctx context.Context, name string, port int) (net.Conn, error) {
	mine, theirs, err := socketPair()
	if err != nil {
		return nil, err
	}
	pc := &portConn{UnixConn: mine, done: make(chan struct{})}
	go func() {
		defer theirs.Close()
		pc.err = c.Forward(context.WithoutCancel(ctx), name, port, theirs)
		close(pc.done)
	}()
	return pc, nil
}

// portConn is DialPort's connection: at its end, the forwarding's error.
type portConn struct {
	*net.UnixConn
	done chan struct{}
	err  error // set before done is closed
}

func (c *portConn) Read(b []byte) (int, error) {
	n, err := c.UnixConn.Read(b)
	if err == io.EOF {
		select {
		case <-c.done:
			if c.err != nil {
				return n, c.err
			}
		default: // the sandbox's side ended its writing; the forwarding goes on
		}
	}
	return n, err
}

// socketPair is two connected Unix stream sockets.
func socketPair() (*net.UnixConn, *net.UnixConn, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("socket pair: %w", err)
	}
	conn := func(fd int, name string) (*net.UnixConn, error) {
		f := os.NewFile(uintptr(fd), name)
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			return nil, err
		}
		return c.(*net.UnixConn), nil
	}
	a, err := conn(fds[0], "port")
	if err != nil {
		syscall.Close(fds[1])
		return nil, nil, err
	}
	b, err := conn(fds[1], "forward")
	if err != nil {
		a.Close()
		return nil, nil, err
	}
	return a, b, nil
}
