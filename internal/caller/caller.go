// Package caller is who makes a request of the API, as the front end that
// received it authenticated them: every front end (gRPC, MCP, a console)
// puts the caller in the request's context with the same rules, and the
// core reads it there to decide what it may see and do, to journal who did
// what and to bound what one caller holds.
package caller

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/url"
	"strings"
)

// Role is what a caller may do in its tenant.
type Role string

// The roles, each allowed what the one before it is and more.
const (
	// Viewer reads: get, list, logs, history, watch, denials.
	Viewer Role = "viewer"
	// Member creates, drives and deletes.
	Member Role = "member"
	// Admin acts in every tenant and on the gateway itself: tenants,
	// tokens, doctor.
	Admin Role = "admin"
)

// Roles are the roles, least first.
var Roles = []Role{Viewer, Member, Admin}

func (r Role) rank() int {
	for i, x := range Roles {
		if x == r {
			return i + 1
		}
	}
	return 0
}

// Allows reports whether a caller of role r may do what needs role need.
func (r Role) Allows(need Role) bool { return r.rank() >= need.rank() && r.rank() > 0 }

// ParseRole reads a role's name.
func ParseRole(s string) (Role, error) {
	if r := Role(s); r.rank() > 0 {
		return r, nil
	}
	return "", fmt.Errorf("unknown role %q: want viewer, member or admin", s)
}

// DefaultTenant is the tenant of a store's records made before tenants,
// and of a gateway's local users.
const DefaultTenant = "default"

// Caller is one authenticated caller.
type Caller struct {
	// Name is how the journal and the logs name them: "client certificate
	// alice", "token ci (3f2a9c1b)", "a local socket user".
	Name string
	// Tenant is the tenant it acts in: where what it makes goes, and the
	// only one whose records it sees unless Every.
	Tenant string
	Role   Role
	// Every is an admin that named no tenant to act in: it sees every
	// tenant's records (and makes new ones in Tenant).
	Every bool
}

// Sees reports whether the caller may see a record of tenant.
func (c Caller) Sees(tenant string) bool { return c.Every || c.Tenant == tenant }

// Scope is the tenant whose records the caller sees, or "" for every one.
func (c Caller) Scope() string {
	if c.Every {
		return ""
	}
	return c.Tenant
}

// String is the caller as the journal shows it: its name, tenant and
// role, "token ci (3f2a9c1b7d4e), tenant acme, member".
func (c Caller) String() string {
	return fmt.Sprintf("%s, tenant %s, %s", c.Name, c.Tenant, c.Role)
}

// Local is whoever reaches the gateway's Unix socket (0600, its owner's):
// an admin.
var Local = Caller{Name: "a local socket user", Tenant: DefaultTenant, Role: Admin, Every: true}

// gateway is the caller of a context no front end set: the gateway's own
// work (the reconciler, pools, tests of the core). Every front end puts a
// caller in each request's context, and refuses a request it cannot
// identify before it reaches the core.
var gateway = Caller{Name: "the gateway", Tenant: DefaultTenant, Role: Admin, Every: true}

// CertificateScheme is the scheme of the URI (a subject alternative name)
// by which a client certificate names its tenant and role:
// "corral:TENANT/ROLE". It is inside what the issuer signed, so a
// certificate claims only what its issuer gave it.
const CertificateScheme = "corral"

// CertificateURI is the URI a client certificate carries for tenant and
// role.
func CertificateURI(tenant string, role Role) *url.URL {
	return &url.URL{Scheme: CertificateScheme, Opaque: tenant + "/" + string(role)}
}

// FromCertificate is the caller a verified client certificate names. A
// certificate without a corral URI was issued before tenants: it is an
// admin of the default tenant (legacy is then true). Two corral URIs, or
// one that does not parse, are refused.
func FromCertificate(cert *x509.Certificate) (c Caller, legacy bool, err error) {
	c = Caller{Name: "client certificate " + cert.Subject.CommonName}
	var found []*url.URL
	for _, u := range cert.URIs {
		if u.Scheme == CertificateScheme {
			found = append(found, u)
		}
	}
	switch len(found) {
	case 0:
		c.Tenant, c.Role, c.Every = DefaultTenant, Admin, true
		return c, true, nil
	case 1:
	default:
		return Caller{}, false, fmt.Errorf("client certificate %s names %d tenants; it may name one", cert.Subject.CommonName, len(found))
	}
	tenant, role, ok := strings.Cut(found[0].Opaque, "/")
	if !ok || tenant == "" {
		return Caller{}, false, fmt.Errorf("client certificate %s: %q is not corral:TENANT/ROLE", cert.Subject.CommonName, found[0])
	}
	if c.Role, err = ParseRole(role); err != nil {
		return Caller{}, false, fmt.Errorf("client certificate %s: %w", cert.Subject.CommonName, err)
	}
	c.Tenant, c.Every = tenant, c.Role == Admin
	return c, false, nil
}

// FromTLS is the caller of a connection with a verified client
// certificate; ok is false when it has none.
func FromTLS(state *tls.ConnectionState) (c Caller, ok bool, err error) {
	if state == nil || len(state.PeerCertificates) == 0 {
		return Caller{}, false, nil
	}
	c, _, err = FromCertificate(state.PeerCertificates[0])
	return c, err == nil, err
}

type key struct{}

// With returns ctx carrying c.
func With(ctx context.Context, c Caller) context.Context {
	return context.WithValue(ctx, key{}, c)
}

// From returns the caller ctx carries, or the gateway itself when no front
// end put one there (its own work).
func From(ctx context.Context) Caller {
	if c, ok := ctx.Value(key{}).(Caller); ok {
		return c
	}
	return gateway
}

// Identified reports whether a front end put a caller in ctx.
func Identified(ctx context.Context) bool {
	_, ok := ctx.Value(key{}).(Caller)
	return ok
}

// InTenant is c acting in tenant, as an admin may choose to; a caller of
// one tenant may name only its own.
func (c Caller) InTenant(tenant string) (Caller, error) {
	switch {
	case tenant == "" || (tenant == c.Tenant && !c.Every):
		return c, nil
	case c.Role != Admin:
		return c, fmt.Errorf("%s acts in tenant %s only, not in %s", c.Name, c.Tenant, tenant)
	}
	c.Tenant, c.Every = tenant, false
	return c, nil
}

// AuthInfo is what the transport of a connection says of its caller when
// a front end inside the gateway made the connection on the caller's
// behalf (MCP over HTTP reaches the API core through such a connection).
// Only such an in-process transport yields it; it implements gRPC's
// credentials.AuthInfo.
type AuthInfo struct{ Caller Caller }

// AuthType implements credentials.AuthInfo.
func (AuthInfo) AuthType() string { return "corral-front-end" }
