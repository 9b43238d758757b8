package secrets

import (
	"context"
	"time"

	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

// MaxValueBytes bounds a secret's value.
const MaxValueBytes = 64 << 10

// Store keeps the sealed secrets (store.Store does).
type Store interface {
	CreateSecret(ctx context.Context, s *sandbox.Secret) error
	UpdateSecret(ctx context.Context, s *sandbox.Secret) error
	GetSecret(ctx context.Context, name string) (*sandbox.Secret, error)
	ListSecrets(ctx context.Context) ([]*sandbox.Secret, error)
	DeleteSecret(ctx context.Context, name string) error
}

// Secrets are a gateway's secrets, write-only: a value goes in and no
// call returns it.
type Secrets struct {
	store Store
	keys  *Keyring
}

// New is the secrets of st, sealed with keys.
func New(st Store, keys *Keyring) *Secrets { return &Secrets{store: st, keys: keys} }

// Info describes a secret: never its value.
type Info struct {
	Name, Fingerprint    string
	CreatedAt, UpdatedAt time.Time
}

func info(s *sandbox.Secret) *Info {
	return &Info{Name: s.Name, Fingerprint: s.Fingerprint, CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt}
}

// sealed is value sealed as secret name's, with its fingerprint.
func (s *Secrets) sealed(name string, value []byte, now time.Time) (*sandbox.Secret, error) {
	if err := sandbox.ValidateSecretName(name); err != nil {
		return nil, err
	}
	switch {
	case len(value) == 0:
		return nil, errdefs.InvalidArgument("secret %q: the value is empty", name)
	case len(value) > MaxValueBytes:
		return nil, errdefs.InvalidArgument("secret %q: the value is %d bytes, more than %d", name, len(value), MaxValueBytes)
	}
	sealed, err := s.keys.Seal(name, value)
	if err != nil {
		return nil, err
	}
	return &sandbox.Secret{Name: name, Sealed: sealed, Fingerprint: s.keys.Fingerprint(value), CreatedAt: now, UpdatedAt: now}, nil
}

// Create stores a new secret.
func (s *Secrets) Create(ctx context.Context, name string, value []byte) (*Info, error) {
	sec, err := s.sealed(name, value, time.Now().UTC())
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
	sec, err := s.sealed(name, value, time.Now().UTC())
	if err != nil {
		return nil, err
	}
	if err := s.store.UpdateSecret(ctx, sec); err != nil {
		return nil, err
	}
	return s.Get(ctx, name)
}

// Get describes a secret.
func (s *Secrets) Get(ctx context.Context, name string) (*Info, error) {
	sec, err := s.store.GetSecret(ctx, name)
	if err != nil {
		return nil, err
	}
	return info(sec), nil
}

// List describes every secret, by name.
func (s *Secrets) List(ctx context.Context) ([]*Info, error) {
	list, err := s.store.ListSecrets(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]*Info, len(list))
	for i, sec := range list {
		out[i] = info(sec)
	}
	return out, nil
}

// Delete removes a secret and returns what it was.
func (s *Secrets) Delete(ctx context.Context, name string) (*Info, error) {
	got, err := s.Get(ctx, name)
	if err != nil {
		return nil, err
	}
	if err := s.store.DeleteSecret(ctx, name); err != nil {
		return nil, err
	}
	return got, nil
}
