package service

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/corral-sandbox/corral/internal/access"
	"github.com/corral-sandbox/corral/internal/caller"
	"github.com/corral-sandbox/corral/internal/errdefs"
)

// Metadata keys a client sets: its bearer token ("Bearer TOKEN"), and the
// tenant it acts in.
const (
	AuthorizationKey = "authorization"
	TenantKey        = "corral-tenant"
)

// ForwardedKey is the metadata key of the caller that a replica in standby
// authenticated, on the call it forwards to the leader's socket (Forward).
// It is read on the Unix socket alone, whose callers are admins already:
// a forwarded caller can only be less than the connection is.
const ForwardedKey = "corral-forwarded-caller"

// Forward is the value of ForwardedKey for c, on a call forwarded by
// replica via.
func Forward(c caller.Caller, via string) (string, error) {
	c.Name += " through replica " + via
	b, err := json.Marshal(c)
	return string(b), err
}

// forwarded is the caller that ctx's ForwardedKey names, if it names one.
func forwarded(ctx context.Context) (caller.Caller, bool, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	v := md.Get(ForwardedKey)
	if len(v) == 0 {
		return caller.Caller{}, false, nil
	}
	var c caller.Caller
	if err := json.Unmarshal([]byte(v[0]), &c); err != nil || c.Name == "" || !c.Role.Allows(caller.Viewer) {
		return caller.Caller{}, true, errdefs.Unauthenticated("a forwarded caller that does not parse: %q", v[0])
	}
	return c, true, nil
}

// Gate is the one step every request takes before its handler: who calls
// (identify), in which tenant, and whether access allows the call. A
// request it refuses reaches nothing of the core. The gRPC server runs it
// on every call; the gateway's HTTP front ends identify their callers
// with HTTPCaller.
type Gate struct{ Tenants Tenants }

// admit returns ctx carrying the caller of method, or the error that
// refuses it.
func (g Gate) admit(ctx context.Context, method string) (context.Context, error) {
	if need, _ := access.Needs(method); need == access.Public {
		return ctx, nil
	}
	c, err := g.identify(ctx)
	if err != nil {
		return nil, toGRPC(err)
	}
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get(TenantKey); len(v) > 0 {
			if c, err = c.InTenant(v[0]); err != nil {
				return nil, toGRPC(errdefs.PermissionDenied("%v", err))
			}
		}
	}
	if err := access.Check(c, method); err != nil {
		return nil, toGRPC(err)
	}
	return caller.With(ctx, c), nil
}

// identify is who a gRPC request comes from: a bearer token when it
// carries one, else the caller a front end inside the gateway connected
// for (caller.AuthInfo), the client certificate verified over mutual TLS,
// or the local user of the Unix socket. Anything else is
// errdefs.ErrUnauthenticated.
func (g Gate) identify(ctx context.Context) (caller.Caller, error) {
	if token, ok := bearer(ctx); ok {
		return g.token(ctx, token)
	}
	p, ok := peer.FromContext(ctx)
	if !ok {
		return caller.Caller{}, errdefs.Unauthenticated(noCredentials)
	}
	if ai, ok := p.AuthInfo.(caller.AuthInfo); ok {
		return ai.Caller, nil
	}
	if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok {
		c, ok, err := caller.FromTLS(&ti.State)
		switch {
		case err != nil:
			return caller.Caller{}, errdefs.Unauthenticated("%v", err)
		case ok:
			return c, nil
		}
	} else if p.Addr != nil && p.Addr.Network() == "unix" {
		if c, ok, err := forwarded(ctx); ok {
			return c, err
		}
		return caller.Local, nil
	}
	return caller.Caller{}, errdefs.Unauthenticated(noCredentials)
}

// Forwarding is the value of ForwardedKey for a call of method that
// replica via forwards: who the call comes from, as the gate of every call
// says; "" for a call that needs no caller (health checks) and brings
// none. A call that needs a caller and brings none is refused here, as a
// gRPC status.
func (g Gate) Forwarding(ctx context.Context, method, via string) (string, error) {
	c, err := g.identify(ctx)
	if err != nil {
		if need, _ := access.Needs(method); need == access.Public {
			return "", nil
		}
		return "", toGRPC(err)
	}
	v, err := Forward(c, via)
	if err != nil {
		return "", toGRPC(err)
	}
	return v, nil
}

// Token is the caller a bearer token names, as the gate of every call
// says (the console's sessions keep a token and ask it on each request).
func (g Gate) Token(ctx context.Context, token string) (caller.Caller, error) {
	return g.token(ctx, token)
}

// token is the caller a bearer token names.
func (g Gate) token(ctx context.Context, token string) (caller.Caller, error) {
	if g.Tenants == nil {
		return caller.Caller{}, errdefs.Unauthenticated("this gateway takes no tokens")
	}
	return g.Tenants.Authenticate(ctx, token)
}

// HTTPCaller is who an HTTP request on the TLS listener comes from: its
// bearer token (Authorization), else its verified client certificate.
// Anything else is errdefs.ErrUnauthenticated.
func (g Gate) HTTPCaller(r *http.Request) (caller.Caller, error) {
	if h := r.Header.Get("Authorization"); h != "" {
		return g.token(r.Context(), bearerToken(h))
	}
	c, ok, err := caller.FromTLS(r.TLS)
	switch {
	case err != nil:
		return caller.Caller{}, errdefs.Unauthenticated("%v", err)
	case !ok:
		return caller.Caller{}, errdefs.Unauthenticated(noCredentials)
	}
	return c, nil
}

// noCredentials is the refusal of a request that brings neither a client
// certificate nor a token.
const noCredentials = "a client certificate or a bearer token is needed (corral gateway client-cert NAME, or corral token create, on the gateway's host)"

// bearer is the token of a request's authorization metadata.
func bearer(ctx context.Context) (string, bool) {
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok {
		return "", false
	}
	v := md.Get(AuthorizationKey)
	if len(v) == 0 {
		return "", false
	}
	return bearerToken(v[0]), true
}

// bearerToken is the token of an authorization "Bearer TOKEN"; an
// authorization of another kind gives "", which no token matches.
func bearerToken(authorization string) string {
	scheme, token, _ := strings.Cut(authorization, " ")
	if !strings.EqualFold(scheme, "bearer") {
		return ""
	}
	return strings.TrimSpace(token)
}

func (g Gate) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	ctx, err := g.admit(ctx, info.FullMethod)
	if err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

func (g Gate) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ctx, err := g.admit(ss.Context(), info.FullMethod)
	if err != nil {
		return err
	}
	return handler(srv, callerStream{ss, ctx})
}

// callerStream is a stream whose context carries its caller.
type callerStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s callerStream) Context() context.Context { return s.ctx }
