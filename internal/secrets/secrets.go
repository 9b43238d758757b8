package secrets

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/corral-sandbox/corral/internal/caller"
	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

// MaxValueBytes bounds a secret's value.
const MaxValueBytes = 64 << 10

// Store keeps the sealed secrets (store.Store does).
type Store interface {
	CreateSecret(ctx context.Context, s *sandbox.Secret) error
	UpdateSecret(ctx context.Context, s *sandbox.Secret) error
	GetSecret(ctx context.Context, tenant, name string) (*sandbox.Secret, error)
	ListSecrets(ctx context.Context, tenant string) ([]*sandbox.Secret, error)
	DeleteSecret(ctx context.Context, tenant, name string) error
}

// Secrets are a gateway's secrets, write-only: a value goes in and no
// call of the API returns it (Value is the egress proxy's alone). Each
// belongs to a tenant: a request acts on the secrets of its caller's
// (internal/caller), and names are unique within a tenant.
type Secrets struct {
	store Store
	keys  *Keyring
	// Binders, when set, lists the sandboxes of a tenant whose policies
	// bind its secret (the lifecycle's records).
	Binders func(ctx context.Context, tenant, secret string) ([]Binder, error)
	// Ledger, when set, is the secrets' usage ledger.
	Ledger Ledger

	mu    sync.Mutex
	gen   uint64            // counts changes, so that a read before one is not cached after it
	cache map[string][]byte // opened values, by sealedAs
}

// Binder is a sandbox whose policy binds a secret.
type Binder struct {
	Name string
	// Running says it runs, or is to: deleting the secret would cut it.
	Running bool
}

// Ledger keeps the uses of secrets (internal/ledger).
type Ledger interface {
	Uses(ctx context.Context, tenant, secret string, follow bool) ([]sandbox.CredentialUse, <-chan sandbox.CredentialUse, func(), error)
	// LastUse returns the newest use of secret, nil when none.
	LastUse(ctx context.Context, tenant, secret string) (*sandbox.CredentialUse, error)
	// SecretGone ends the following of a deleted secret's uses.
	SecretGone(tenant, name string)
}

// New is the secrets of st, sealed with keys.
func New(st Store, keys *Keyring) *Secrets {
	return &Secrets{store: st, keys: keys, cache: map[string][]byte{}}
}

// Info describes a secret: never its value.
type Info struct {
	Name, Tenant, Fingerprint string
	CreatedAt, UpdatedAt      time.Time
	// BoundBy names the sandboxes whose policies bind it (Get only).
	BoundBy []string
	// LastUse is the newest entry of its ledger (Get only).
	LastUse *sandbox.CredentialUse
}

func info(s *sandbox.Secret) *Info {
	return &Info{Name: s.Name, Tenant: s.Tenant, Fingerprint: s.Fingerprint, CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt}
}

// sealedAs is what a tenant's secret is sealed as (the keyring binds the
// sealed value to it): its name alone in the default tenant, as before
// tenants, else TENANT/NAME (a tenant's name has no '/').
func sealedAs(tenant, name string) string {
	if tenant == caller.DefaultTenant {
		return name
	}
	return tenant + "/" + name
}

// sealed is value sealed as tenant's secret name's, with its fingerprint.
func (s *Secrets) sealed(tenant, name string, value []byte, now time.Time) (*sandbox.Secret, error) {
	if err := sandbox.ValidateSecretName(name); err != nil {
		return nil, err
	}
	switch {
	case len(value) == 0:
		return nil, errdefs.InvalidArgument("secret %q: the value is empty", name)
	case len(value) > MaxValueBytes:
		return nil, errdefs.InvalidArgument("secret %q: the value is %d bytes, more than %d", name, len(value), MaxValueBytes)
	}
	sealed, err := s.keys.Seal(sealedAs(tenant, name), value)
	if err != nil {
		return nil, err
	}
	return &sandbox.Secret{Name: name, Tenant: tenant, Sealed: sealed, Fingerprint: s.keys.Fingerprint(value), CreatedAt: now, UpdatedAt: now}, nil
}

// Create stores a new secret in the caller's tenant.
func (s *Secrets) Create(ctx context.Context, name string, value []byte) (*Info, error) {
	sec, err := s.sealed(caller.From(ctx).Tenant, name, value, time.Now().UTC())
	if err != nil {
		return nil, err
	}
	if err := s.store.CreateSecret(ctx, sec); err != nil {
		return nil, err
	}
	return info(sec), nil
}

// Update replaces a secret's value.
func (s *Secrets) Update(ctx context.Context, name string, value []byte) (*Info, error) {
	sec, err := s.sealed(caller.From(ctx).Tenant, name, value, time.Now().UTC())
	if err != nil {
		return nil, err
	}
	if err := s.store.UpdateSecret(ctx, sec); err != nil {
		return nil, err
	}
	s.changed(sec.Tenant, name)
	return s.Get(ctx, name)
}

// Get describes a secret: which sandboxes bind it, and its last use.
func (s *Secrets) Get(ctx context.Context, name string) (*Info, error) {
	sec, binders, err := s.withBinders(ctx, name)
	if err != nil {
		return nil, err
	}
	return s.describe(ctx, sec, binders), nil
}

// withBinders returns secret name of the caller's tenant and the
// sandboxes that bind it.
func (s *Secrets) withBinders(ctx context.Context, name string) (*sandbox.Secret, []Binder, error) {
	tenant := caller.From(ctx).Tenant
	sec, err := s.store.GetSecret(ctx, tenant, name)
	if err != nil || s.Binders == nil {
		return sec, nil, err
	}
	binders, err := s.Binders(ctx, tenant, name)
	return sec, binders, err
}

// describe is Get's description of sec, which binders bind.
func (s *Secrets) describe(ctx context.Context, sec *sandbox.Secret, binders []Binder) *Info {
	i := info(sec)
	for _, b := range binders {
		i.BoundBy = append(i.BoundBy, b.Name)
	}
	if s.Ledger != nil {
		if last, err := s.Ledger.LastUse(ctx, sec.Tenant, sec.Name); err == nil {
			i.LastUse = last
		}
	}
	return i
}

// List describes the secrets the caller sees, by tenant and name.
func (s *Secrets) List(ctx context.Context) ([]*Info, error) {
	list, err := s.store.ListSecrets(ctx, caller.From(ctx).Scope())
	if err != nil {
		return nil, err
	}
	out := make([]*Info, len(list))
	for i, sec := range list {
		out[i] = info(sec)
	}
	return out, nil
}

// Delete removes a secret and returns what it was. While a running
// sandbox binds it, only force does: the requests that would carry it
// are refused from then on.
func (s *Secrets) Delete(ctx context.Context, name string, force bool) (*Info, error) {
	sec, binders, err := s.withBinders(ctx, name)
	if err != nil {
		return nil, err
	}
	var running []string
	for _, b := range binders {
		if b.Running {
			running = append(running, b.Name)
		}
	}
	if len(running) > 0 && !force {
		return nil, errdefs.FailedPrecondition("secret %q is bound by running sandboxes (%s): stop them or take it out of their policies first, or delete --force, which cuts those bindings at once",
			name, strings.Join(running, ", "))
	}
	got := s.describe(ctx, sec, binders) // its last use goes with it
	if err := s.store.DeleteSecret(ctx, sec.Tenant, name); err != nil {
		return nil, err
	}
	s.changed(sec.Tenant, name)
	if s.Ledger != nil {
		s.Ledger.SecretGone(sec.Tenant, name)
	}
	return got, nil
}

// Usage returns the newest entries of a secret's ledger, oldest first,
// and with follow a channel of those to come (closed when the secret is
// deleted) and its stop.
func (s *Secrets) Usage(ctx context.Context, name string, follow bool) ([]sandbox.CredentialUse, <-chan sandbox.CredentialUse, func(), error) {
	tenant := caller.From(ctx).Tenant
	if _, err := s.store.GetSecret(ctx, tenant, name); err != nil {
		return nil, nil, nil, err
	}
	if s.Ledger == nil {
		return nil, nil, nil, errdefs.FailedPrecondition("this gateway keeps no ledger of secrets")
	}
	return s.Ledger.Uses(ctx, tenant, name, follow)
}

// Value returns a secret's current value, for the egress proxy that
// injects it: opened once, then kept in memory until the secret changes
// (an update is used by the next request).
func (s *Secrets) Value(ctx context.Context, tenant, name string) ([]byte, error) {
	key := sealedAs(tenant, name)
	s.mu.Lock()
	v, ok := s.cache[key]
	gen := s.gen
	s.mu.Unlock()
	if ok {
		return v, nil
	}
	sec, err := s.store.GetSecret(ctx, tenant, name)
	if err != nil {
		return nil, err
	}
	if v, err = s.keys.Open(key, sec.Sealed); err != nil {
		return nil, err
	}
	s.mu.Lock()
	if s.gen == gen { // no change since the read
		s.cache[key] = v
	}
	s.mu.Unlock()
	return v, nil
}

// changed forgets what Value kept of a tenant's secret.
func (s *Secrets) changed(tenant, name string) {
	s.mu.Lock()
	s.gen++
	delete(s.cache, sealedAs(tenant, name))
	s.mu.Unlock()
}
