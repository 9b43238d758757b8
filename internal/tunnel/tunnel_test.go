package tunnel

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
)

// tcpPair is both ends of one loopback TCP connection.
func tcpPair(t *testing.T) (*net.TCPConn, *net.TCPConn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	dialed, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	accepted, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dialed.Close(); accepted.Close() })
	// a direction that never ends fails the test instead of hanging it
	deadline := time.Now().Add(time.Minute)
	dialed.SetDeadline(deadline)
	accepted.SetDeadline(deadline)
	return dialed.(*net.TCPConn), accepted.(*net.TCPConn)
}

// call is a PortForward call in memory: the client's and the gateway's
// Frames. The client's CloseSend ends the gateway's Recv with io.EOF;
// end (the gateway returning) ends the client's with err.
func call() (client, gateway *Frames, end func(err error)) {
	up, down := make(chan *corralv1.PortForwardFrame, 4), make(chan *corralv1.PortForwardFrame, 4)
	ended := make(chan struct{})
	var endErr error
	recv := func(ch chan *corralv1.PortForwardFrame, err func() error) func() (*corralv1.PortForwardFrame, error) {
		return func() (*corralv1.PortForwardFrame, error) {
			if f, ok := <-ch; ok {
				return f, nil
			}
			return nil, err()
		}
	}
	client = &Frames{
		Send:      func(f *corralv1.PortForwardFrame) error { up <- f; return nil },
		Recv:      recv(down, func() error { <-ended; return endErr }),
		CloseSend: func() error { close(up); return nil },
	}
	gateway = &Frames{
		Send: func(f *corralv1.PortForwardFrame) error { down <- f; return nil },
		Recv: recv(up, func() error { return io.EOF }),
	}
	return client, gateway, func(err error) { endErr = err; close(down); close(ended) }
}

// halfCloses checks, from the two outer ends of a tunnel, that each
// direction ends on its own: x writes and half-closes, y reads it to EOF
// and still writes back, then half-closes, and x reads that to EOF.
func halfCloses(t *testing.T, x, y *net.TCPConn) {
	t.Helper()
	if _, err := x.Write([]byte("request")); err != nil {
		t.Fatal(err)
	}
	if err := x.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(y); err != nil || string(got) != "request" {
		t.Fatalf("y read %q, %v", got, err)
	}
	if _, err := y.Write([]byte("answer after the request's end")); err != nil {
		t.Fatal(err)
	}
	if err := y.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(x); err != nil || string(got) != "answer after the request's end" {
		t.Fatalf("x read %q, %v", got, err)
	}
}

func TestJoinConnections(t *testing.T) {
	x, a := tcpPair(t)
	b, y := tcpPair(t)
	joined := make(chan error, 1)
	go func() { joined <- Join(a, b) }()
	halfCloses(t, x, y)
	if err := <-joined; err != nil {
		t.Fatal(err)
	}
}

// A connection through a PortForward call, as the CLI and the gateway
// join it: x is the local client, y the server in the sandbox.
func TestJoinThroughFrames(t *testing.T) {
	x, local := tcpPair(t)
	inside, y := tcpPair(t)
	client, gateway, end := call()
	cli, gw := make(chan error, 1), make(chan error, 1)
	go func() { cli <- Join(local, client) }()
	go func() { err := Join(gateway, inside); end(nil); gw <- err }()
	halfCloses(t, x, y)
	if err := <-gw; err != nil {
		t.Fatalf("gateway side: %v", err)
	}
	if err := <-cli; err != nil {
		t.Fatalf("client side: %v", err)
	}
}

// A call that fails ends the client's side with its error.
func TestJoinReturnsTheCallsError(t *testing.T) {
	_, local := tcpPair(t)
	client, _, end := call()
	failed := errors.New("connection refused inside the sandbox")
	end(failed)
	if err := Join(local, client); !errors.Is(err, failed) {
		t.Fatalf("Join = %v, want %v", err, failed)
	}
}

// Frames larger than a read are read in pieces, in order.
func TestFramesReadInPieces(t *testing.T) {
	client, gateway, end := call()
	go func() {
		gateway.Write([]byte("0123456789"))
		gateway.Write([]byte("abc"))
		gateway.CloseWrite()
		end(nil)
	}()
	var got []byte
	buf := make([]byte, 4)
	for {
		n, err := client.Read(buf)
		got = append(got, buf[:n]...)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if string(got) != "0123456789abc" {
		t.Fatalf("read %q", got)
	}
}
