package gateway

import (
	"context"
	"errors"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/corral-sandbox/corral/client"
	"github.com/corral-sandbox/corral/internal/caller"
	"github.com/corral-sandbox/corral/internal/connqueue"
	"github.com/corral-sandbox/corral/internal/service"
)

// frontEnds is how a front end inside the gateway (MCP over HTTP) reaches
// the API core exactly as a remote client does, through the gRPC service
// and so through every rule of the core, on in-process connections that
// carry the caller the front end authenticated.
type frontEnds struct {
	srv   *grpc.Server
	conns *connqueue.Queue // the server's ends of the in-process connections
}

// newFrontEnds serves the API on in-process connections.
func newFrontEnds(core service.Core) *frontEnds {
	f := &frontEnds{conns: connqueue.New(frontEndAddr{}, nil)}
	f.srv = service.NewServer(core, grpc.Creds(frontEndCreds{}))
	go func() { _ = f.srv.Serve(f.conns) }()
	return f
}

// Client is a client of the API core on behalf of c; closing it closes
// its connection.
func (f *frontEnds) Client(c caller.Caller) (*client.Client, error) {
	conn, err := grpc.NewClient("passthrough:///corral-front-end",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			mine, theirs := net.Pipe()
			if err := f.conns.Put(ctx, callerConn{theirs, c}); err != nil {
				mine.Close()
				theirs.Close()
				if errors.Is(err, net.ErrClosed) {
					return nil, errors.New("the gateway is shutting down")
				}
				return nil, err
			}
			return mine, nil
		}))
	if err != nil {
		return nil, err
	}
	return client.NewFromConn(conn, "this gateway"), nil
}

type frontEndAddr struct{}

func (frontEndAddr) Network() string { return "corral-front-end" }
func (frontEndAddr) String() string  { return "corral-front-end" }

// callerConn is the server's end of an in-process connection, with the
// caller it is for.
type callerConn struct {
	net.Conn
	caller caller.Caller
}

// frontEndCreds are the in-process server's transport credentials: the
// connection's caller, which only a front end inside the gateway sets.
type frontEndCreds struct{}

func (frontEndCreds) ServerHandshake(c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	cc, ok := c.(callerConn)
	if !ok {
		return nil, nil, errors.New("front-end connection without a caller")
	}
	return cc, caller.AuthInfo{Caller: cc.caller}, nil
}

func (frontEndCreds) ClientHandshake(_ context.Context, _ string, c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return c, nil, errors.New("front-end credentials are the server's")
}

func (frontEndCreds) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "corral-front-end"}
}
func (frontEndCreds) Clone() credentials.TransportCredentials { return frontEndCreds{} }
func (frontEndCreds) OverrideServerName(string) error         { return nil }
