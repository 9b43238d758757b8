package service

import (
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/testenv"
)

// ports is a Lifecycle whose sandboxes' ports are ports of the test's
// loopback.
type ports struct{ Lifecycle }

func (ports) DialPort(ctx context.Context, name string, port int) (net.Conn, error) {
	if name != "web" {
		return nil, errdefs.FailedPrecondition("sandbox %q is stopped, not ready", name)
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", "127.0.0.1:"+strconv.Itoa(port))
}

// counter reads each connection to its end, then answers with how many
// bytes it read and closes: it answers only once the caller half-closed.
func counter(t *testing.T) int {
	t.Helper()
	return testenv.ServeLoopback(t, func(c net.Conn) {
		n, _ := io.Copy(io.Discard, c)
		fmt.Fprintf(c, "read %d bytes", n)
	})
}

// The frames of one forwarded connection: data up, the caller's
// CloseSend as its half-close, the answer down, then close_write, then
// the end of the call with OK.
func TestPortForwardFrames(t *testing.T) {
	api := corralv1.NewSandboxServiceClient(dial(t, Core{Sandboxes: ports{}}))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stream, err := api.PortForward(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&corralv1.PortForwardFrame{Name: "web", Port: int32(counter(t))}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := stream.Send(&corralv1.PortForwardFrame{Data: make([]byte, 1000)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	var got []byte
	for {
		f, err := stream.Recv()
		if err != nil {
			t.Fatalf("before close_write, after %q: %v", got, err)
		}
		got = append(got, f.Data...)
		if f.CloseWrite {
			break
		}
	}
	if string(got) != "read 3000 bytes" {
		t.Fatalf("answer %q", got)
	}
	if _, err := stream.Recv(); err != io.EOF {
		t.Fatalf("after close_write: %v, want the end of the call", err)
	}
}

func TestPortForwardRefusals(t *testing.T) {
	api := corralv1.NewSandboxServiceClient(dial(t, Core{Sandboxes: ports{}}))
	for _, c := range []struct {
		first *corralv1.PortForwardFrame
		code  codes.Code
		msg   string
	}{
		{&corralv1.PortForwardFrame{Port: 80}, codes.InvalidArgument, "names the sandbox"},
		{&corralv1.PortForwardFrame{Name: "web", Port: 80, Data: []byte("x")}, codes.InvalidArgument, "carries no data"},
		{&corralv1.PortForwardFrame{Name: "stopped", Port: 80}, codes.FailedPrecondition, `sandbox "stopped" is stopped`},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		stream, err := api.PortForward(ctx)
		if err == nil {
			err = stream.Send(c.first)
		}
		if err == nil || err == io.EOF {
			_, err = stream.Recv()
		}
		cancel()
		if s, _ := status.FromError(err); s.Code() != c.code || !strings.Contains(s.Message(), c.msg) {
			t.Errorf("first frame %v: %v, want %s with %q", c.first, err, c.code, c.msg)
		}
	}
}
