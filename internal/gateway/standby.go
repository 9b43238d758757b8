package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/corral-sandbox/corral/client"
	"github.com/corral-sandbox/corral/internal/caller"
	"github.com/corral-sandbox/corral/internal/config"
	"github.com/corral-sandbox/corral/internal/service"
)

// standby is what a replica that does not hold the store serves on its
// TLS listener: every gRPC call goes, as it came, to the socket of the
// leader in the shared home, carrying the caller this replica
// authenticated (service.ForwardedKey), so that the leader's API core
// decides it by the same rules as every other call. Nothing is decided
// here but who calls. MCP over HTTP is served here, its tools calling the
// leader the same way (leaderClients).
type standby struct {
	srv    *grpc.Server
	web    *http.Server
	leader *grpc.ClientConn
	lis    net.Listener
}

// serveStandby serves the forwarding API of replica id on cfg.Listen.
func serveStandby(cfg config.Config, home, id string, gate service.Gate, log *slog.Logger) (*standby, error) {
	tlsCfg, err := serverTLS(cfg, home, log)
	if err != nil {
		return nil, err
	}
	// The leader's socket is gone for the instant of a takeover: a call
	// waits for the next leader (leaderWait at most).
	leader, err := grpc.NewClient("unix://"+config.SocketPath(home), append(leaderOptions(),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{}), grpc.WaitForReady(true)))...)
	if err != nil {
		return nil, err
	}
	lis, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		leader.Close()
		return nil, fmt.Errorf("listen on %s: %w", cfg.Listen, err)
	}
	f := forwarder{leader: leader, gate: gate, via: id}
	split := newTLSSplit(lis, tlsCfg, log)
	s := &standby{leader: leader, lis: lis,
		srv: grpc.NewServer(append(service.StreamOptions(), grpc.Creds(handshaken{}),
			grpc.ForceServerCodec(rawCodec{}), grpc.UnknownServiceHandler(f.handle))...),
		web: &http.Server{ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
			Handler: newMCPEndpoint(leaderClients{socket: config.SocketPath(home), via: id}, gate, cfg.MCP.MaxSandboxes)}}
	background(log, "API server (TCP, standby)", func() error { return s.srv.Serve(split.h2) }, grpc.ErrServerStopped)
	background(log, "MCP server (TCP, standby)", func() error {
		if err := s.web.Serve(split.http1); !errors.Is(err, net.ErrClosed) {
			return err
		}
		return http.ErrServerClosed
	}, http.ErrServerClosed)
	log.Info("standby: serving the API and MCP with mutual TLS, every call through the replica that holds the store", "address", lis.Addr().String())
	return s, nil
}

// leaderOptions dial the leader's socket: a call waits for the leader
// through a takeover, looked for every 100 ms to a second rather than
// gRPC's default backoff.
func leaderOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, MaxDelay: time.Second}, MinConnectTimeout: time.Second})}
}

// leaderClients are a standby's clients of the leader's socket, each call
// carrying the caller (service.ForwardedKey), for its MCP endpoint.
type leaderClients struct {
	socket, via string
}

func (l leaderClients) Client(c caller.Caller) (*client.Client, error) {
	v, err := service.Forward(c, l.via)
	if err != nil {
		return nil, err
	}
	as := func(ctx context.Context) context.Context {
		return metadata.AppendToOutgoingContext(ctx, service.ForwardedKey, v)
	}
	conn, err := grpc.NewClient("unix://"+l.socket, append(leaderOptions(),
		grpc.WithDefaultCallOptions(grpc.WaitForReady(true)),
		grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			return invoke(as(ctx), method, req, reply, cc, opts...)
		}),
		grpc.WithStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, stream grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			return stream(as(ctx), desc, cc, method, opts...)
		}))...)
	if err != nil {
		return nil, err
	}
	return client.NewFromConn(conn, "the leader"), nil
}

// stop ends the standby's listener and every call it forwards (their
// callers retry on the leader this replica is about to become).
func (s *standby) stop() {
	s.srv.Stop()
	_ = s.web.Close()
	_ = s.leader.Close()
}

// leaderWait bounds how long a forwarded call waits for a leader to
// answer: beyond a takeover, a standby without one is soon the leader.
const leaderWait = 30 * time.Second

// forwarder forwards every call it is given to the leader.
type forwarder struct {
	leader *grpc.ClientConn
	gate   service.Gate
	via    string
}

func (f forwarder) handle(_ any, in grpc.ServerStream) error {
	method, ok := grpc.MethodFromServerStream(in)
	if !ok {
		return status.Error(codes.Internal, "a call without a method")
	}
	md, _ := metadata.FromIncomingContext(in.Context())
	md = md.Copy()
	delete(md, service.AuthorizationKey) // the caller goes as authenticated here
	delete(md, service.ForwardedKey)
	v, err := f.gate.Forwarding(in.Context(), method, f.via)
	if err != nil {
		return err
	}
	if v != "" {
		md.Set(service.ForwardedKey, v)
	}
	ctx, cancel := context.WithCancel(metadata.NewOutgoingContext(in.Context(), md))
	defer cancel()
	connected := make(chan struct{})
	waited := make(chan bool, 1)
	go func() {
		select {
		case <-connected:
			waited <- false
		case <-time.After(leaderWait):
			waited <- true
			cancel()
		}
	}()
	out, err := f.leader.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, method)
	close(connected)
	if <-waited {
		return status.Errorf(codes.Unavailable, "no replica has held the store for %v: try again", leaderWait)
	}
	if err != nil {
		return err
	}
	go func() { // the caller's messages, then its half-close
		for {
			m := new(rawFrame)
			if err := in.RecvMsg(m); err != nil {
				if errors.Is(err, io.EOF) {
					_ = out.CloseSend()
				} else {
					cancel()
				}
				return
			}
			if err := out.SendMsg(m); err != nil {
				return // the leader's side ends the call; its status is read below
			}
		}
	}()
	header, err := out.Header()
	if err != nil {
		return err
	}
	if err := in.SendHeader(header); err != nil {
		return err
	}
	for {
		m := new(rawFrame)
		if err := out.RecvMsg(m); err != nil {
			in.SetTrailer(out.Trailer())
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if err := in.SendMsg(m); err != nil {
			return err
		}
	}
}

// rawFrame is one message of a forwarded call, as its bytes.
type rawFrame struct{ b []byte }

// rawCodec passes messages as they are.
type rawCodec struct{}

var _ encoding.Codec = rawCodec{}

func (rawCodec) Marshal(v any) ([]byte, error) {
	f, ok := v.(*rawFrame)
	if !ok {
		return nil, fmt.Errorf("forwarding: a %T is not a frame", v)
	}
	return f.b, nil
}

func (rawCodec) Unmarshal(data []byte, v any) error {
	f, ok := v.(*rawFrame)
	if !ok {
		return fmt.Errorf("forwarding: a %T is not a frame", v)
	}
	f.b = append(f.b[:0], data...)
	return nil
}

func (rawCodec) Name() string { return "proto" }
