// Package tenants is the API core's part for tenants and bearer tokens:
// tenants with their quotas (enforced by the store, with each create),
// tokens made, checked and revoked. Which caller may call what is
// internal/access's; what a caller sees is its tenant's.
package tenants

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/corral-sandbox/corral/internal/caller"
	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

// Store keeps tenants and tokens, and lists a tenant's sandboxes
// (store.Store does).
type Store interface {
	CreateTenant(ctx context.Context, t *sandbox.Tenant) error
	UpdateTenant(ctx context.Context, t *sandbox.Tenant) error
	GetTenant(ctx context.Context, name string) (*sandbox.Tenant, sandbox.Usage, error)
	ListTenants(ctx context.Context) ([]*sandbox.Tenant, error)
	DeleteTenant(ctx context.Context, name string) error
	CreateToken(ctx context.Context, t *sandbox.Token) error
	TokenByHash(ctx context.Context, hash []byte) (*sandbox.Token, error)
	ListTokens(ctx context.Context, tenant string) ([]*sandbox.Token, error)
	RevokeToken(ctx context.Context, nameOrID string, at time.Time) (*sandbox.Token, error)
	ListSandboxes(ctx context.Context, tenant string) ([]*sandbox.Sandbox, error)
}

// Deleter deletes a sandbox as DeleteSandbox does (the lifecycle).
type Deleter func(ctx context.Context, nameOrID string, force bool) (*sandbox.Sandbox, error)

// Tenants are a gateway's tenants and tokens.
type Tenants struct {
	store  Store
	delete Deleter
	now    func() time.Time
}

// New is the tenants of st; delete deletes a tenant's sandboxes when the
// tenant is deleted with force.
func New(st Store, delete Deleter) *Tenants {
	return &Tenants{store: st, delete: delete, now: func() time.Time { return time.Now().UTC() }}
}

// Create makes a tenant.
func (t *Tenants) Create(ctx context.Context, name string, q sandbox.Quota) (*sandbox.Tenant, error) {
	if err := sandbox.ValidateTenantName(name); err != nil {
		return nil, err
	}
	if err := validQuota(q); err != nil {
		return nil, err
	}
	now := t.now()
	tn := &sandbox.Tenant{Name: name, Quota: q, CreatedAt: now, UpdatedAt: now}
	return tn, t.store.CreateTenant(ctx, tn)
}

func validQuota(q sandbox.Quota) error {
	if q.Sandboxes < 0 || q.MemoryBytes < 0 || q.CPUMillis < 0 || q.DiskBytes < 0 || q.SnapshotBytes < 0 {
		return errdefs.InvalidArgument("a quota is 0 (no bound) or more")
	}
	return nil
}

// Get returns a tenant the caller sees ("" is its own) and what its
// sandboxes hold. Another tenant is not found, as if it did not exist.
func (t *Tenants) Get(ctx context.Context, name string) (*sandbox.Tenant, sandbox.Usage, error) {
	who := caller.From(ctx)
	if name == "" {
		name = who.Tenant
	}
	if !who.Sees(name) {
		return nil, sandbox.Usage{}, errdefs.NotFound("tenant %q not found", name)
	}
	return t.store.GetTenant(ctx, name)
}

// List returns every tenant.
func (t *Tenants) List(ctx context.Context) ([]*sandbox.Tenant, error) {
	return t.store.ListTenants(ctx)
}

// QuotaFields are the names UpdateQuota's fields take.
var QuotaFields = []string{"max_sandboxes", "max_memory_bytes", "max_cpu_millis", "max_disk_bytes", "max_snapshot_bytes"}

// Update sets the fields of a tenant's quota that fields names (every one
// when empty) to q's.
func (t *Tenants) Update(ctx context.Context, name string, q sandbox.Quota, fields []string) (*sandbox.Tenant, error) {
	if err := validQuota(q); err != nil {
		return nil, err
	}
	tn, _, err := t.store.GetTenant(ctx, name)
	if err != nil {
		return nil, err
	}
	if len(fields) == 0 {
		fields = QuotaFields
	}
	for _, f := range fields {
		switch f {
		case "max_sandboxes":
			tn.Quota.Sandboxes = q.Sandboxes
		case "max_memory_bytes":
			tn.Quota.MemoryBytes = q.MemoryBytes
		case "max_cpu_millis":
			tn.Quota.CPUMillis = q.CPUMillis
		case "max_disk_bytes":
			tn.Quota.DiskBytes = q.DiskBytes
		case "max_snapshot_bytes":
			tn.Quota.SnapshotBytes = q.SnapshotBytes
		default:
			return nil, errdefs.InvalidArgument("unknown quota field %q: want one of %s", f, strings.Join(QuotaFields, ", "))
		}
	}
	tn.UpdatedAt = t.now()
	return tn, t.store.UpdateTenant(ctx, tn)
}

// Delete removes a tenant with its pools, secrets and tokens. A tenant
// with sandboxes is refused unless force, which deletes each as
// DeleteSandbox does (journaled as the caller's). The default tenant,
// the local socket's, stays.
func (t *Tenants) Delete(ctx context.Context, name string, force bool) (*sandbox.Tenant, error) {
	if name == caller.DefaultTenant {
		return nil, errdefs.FailedPrecondition("tenant %q is the local socket's and older certificates'; it cannot be deleted", name)
	}
	tn, _, err := t.store.GetTenant(ctx, name)
	if err != nil {
		return nil, err
	}
	if force {
		who := caller.From(ctx)
		who.Every = true // the deletes find the tenant's sandboxes whatever tenant the admin acts in
		all := caller.With(ctx, who)
		list, err := t.store.ListSandboxes(ctx, name)
		if err != nil {
			return nil, err
		}
		for _, sb := range list {
			if sb.Desired == sandbox.DesiredDeleted {
				continue
			}
			if _, err := t.delete(all, sb.ID, false); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
				return nil, fmt.Errorf("delete sandbox %q of tenant %q: %w", sb.Name, name, err)
			}
		}
	}
	return tn, t.store.DeleteTenant(ctx, name)
}

// tokenPrefix starts every token, so that one is recognized in a file or
// a log (and scanners can find one that leaked).
const tokenPrefix = "corral_tk_"

// MinTTL is the shortest a token may live.
const MinTTL = time.Second

// CreateToken makes a bearer token of tenant with role, valid for ttl,
// and returns it (the only time it is seen) with what is kept of it.
func (t *Tenants) CreateToken(ctx context.Context, tenant string, role caller.Role, ttl time.Duration, name string) (string, *sandbox.Token, error) {
	if _, err := caller.ParseRole(string(role)); err != nil {
		return "", nil, errdefs.InvalidArgument("%v", err)
	}
	if ttl < MinTTL {
		return "", nil, errdefs.InvalidArgument("a token's ttl is %s at least, not %s", MinTTL, ttl)
	}
	var secret [32]byte
	if _, err := rand.Read(secret[:]); err != nil {
		return "", nil, err
	}
	token := tokenPrefix + base64.RawURLEncoding.EncodeToString(secret[:])
	hash := sha256.Sum256([]byte(token))
	id := hex.EncodeToString(hash[:])[:12]
	if name == "" {
		name = "token-" + id
	} else if err := sandbox.ValidateTokenName(name); err != nil {
		return "", nil, err
	}
	now := t.now()
	tk := &sandbox.Token{ID: id, Name: name, Tenant: tenant, Role: string(role), Hash: hash[:], CreatedAt: now, ExpiresAt: now.Add(ttl)}
	if err := t.store.CreateToken(ctx, tk); err != nil {
		return "", nil, err
	}
	return token, tk, nil
}

// ListTokens returns the tokens of tenant ("" for every one).
func (t *Tenants) ListTokens(ctx context.Context, tenant string) ([]*sandbox.Token, error) {
	return t.store.ListTokens(ctx, tenant)
}

// RevokeToken revokes a token by name or id: refused from the next request
// on.
func (t *Tenants) RevokeToken(ctx context.Context, nameOrID string) (*sandbox.Token, error) {
	return t.store.RevokeToken(ctx, nameOrID, t.now())
}

// Authenticate is the caller a bearer token names, read from the store
// on each request, so that a revocation or an expiry holds at once. A
// token that is not one, unknown, revoked or expired is
// errdefs.ErrUnauthenticated (its text is never in the error).
func (t *Tenants) Authenticate(ctx context.Context, token string) (caller.Caller, error) {
	if !strings.HasPrefix(token, tokenPrefix) {
		return caller.Caller{}, errdefs.Unauthenticated("not a corral token (they start with %s)", tokenPrefix)
	}
	hash := sha256.Sum256([]byte(token))
	tk, err := t.store.TokenByHash(ctx, hash[:])
	switch {
	case errors.Is(err, errdefs.ErrNotFound):
		return caller.Caller{}, errdefs.Unauthenticated("unknown token")
	case err != nil:
		return caller.Caller{}, err
	case !tk.RevokedAt.IsZero():
		return caller.Caller{}, errdefs.Unauthenticated("token %s (%s) was revoked at %s", tk.Name, tk.ID, tk.RevokedAt.Format(time.RFC3339))
	case !t.now().Before(tk.ExpiresAt):
		return caller.Caller{}, errdefs.Unauthenticated("token %s (%s) expired at %s", tk.Name, tk.ID, tk.ExpiresAt.Format(time.RFC3339))
	}
	role, err := caller.ParseRole(tk.Role)
	if err != nil {
		return caller.Caller{}, errdefs.Unauthenticated("token %s: %v", tk.Name, err)
	}
	return caller.Caller{Name: fmt.Sprintf("token %s (%s)", tk.Name, tk.ID), Tenant: tk.Tenant, Role: role, Every: role == caller.Admin}, nil
}
