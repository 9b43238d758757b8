// Package caller is who makes a request of the API, as the front end that
// received it authenticated them: every front end (gRPC, MCP, a console)
// puts the caller in the request's context with the same rules, and the
// core (the lifecycle) reads it there to journal who did what and to
// bound what one caller holds.
package caller

import (
	"context"
	"crypto/tls"
)

// Caller is one authenticated caller.
type Caller struct {
	// Name is how the journal and the logs name them: "client certificate
	// alice", "a local socket user".
	Name string
}

// Local is whoever reaches the gateway's Unix socket (0600, its owner's).
var Local = Caller{Name: "a local socket user"}

// unknown names a request no front end identified: it shares one budget
// with every other such request and is journaled as such.
var unknown = Caller{Name: "an unidentified caller"}

// FromTLS is the caller of a connection with a verified client
// certificate, or false when it has none.
func FromTLS(state *tls.ConnectionState) (Caller, bool) {
	if state == nil || len(state.PeerCertificates) == 0 {
		return Caller{}, false
	}
	return Caller{Name: "client certificate " + state.PeerCertificates[0].Subject.CommonName}, true
}

type key struct{}

// With returns ctx carrying c.
func With(ctx context.Context, c Caller) context.Context {
	return context.WithValue(ctx, key{}, c)
}

// From returns the caller ctx carries, or one named "an unidentified
// caller" when no front end identified the request.
func From(ctx context.Context) Caller {
	if c, ok := ctx.Value(key{}).(Caller); ok {
		return c
	}
	return unknown
}

// AuthInfo is what the transport of a connection says of its caller when
// a front end inside the gateway made the connection on the caller's
// behalf (MCP over HTTP reaches the API core through such a connection).
// Only such an in-process transport yields it; it implements gRPC's
// credentials.AuthInfo.
type AuthInfo struct{ Caller Caller }

// AuthType implements credentials.AuthInfo.
func (AuthInfo) AuthType() string { return "corral-front-end" }
