package service

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	"github.com/corral-sandbox/corral/internal/caller"
)

// callerOf puts in ctx who a gRPC request comes from, by the caller
// package's rules: the client certificate verified over mutual TLS, the
// local user of the Unix socket, or the caller a front end inside the
// gateway connected for (caller.AuthInfo). Anything else stays
// unidentified.
func callerOf(ctx context.Context) context.Context {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return ctx
	}
	if ai, ok := p.AuthInfo.(caller.AuthInfo); ok {
		return caller.With(ctx, ai.Caller)
	}
	if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok {
		if c, ok := caller.FromTLS(&ti.State); ok {
			return caller.With(ctx, c)
		}
		return ctx
	}
	if p.Addr != nil && p.Addr.Network() == "unix" {
		return caller.With(ctx, caller.Local)
	}
	return ctx
}

func unaryCaller(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	return handler(callerOf(ctx), req)
}

func streamCaller(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return handler(srv, callerStream{ss, callerOf(ss.Context())})
}

// callerStream is a stream whose context carries its caller.
type callerStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s callerStream) Context() context.Context { return s.ctx }
