package storetest

import (
	"bytes"
	"context"
	"errors"
	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"testing"
	"time"
)

// Secrets are kept as given (sealed by the caller), by name, and survive
// the store's reopening.
func testSecrets(t *testing.T, open Opener) {
	ctx := context.Background()
	s := open(t, "kept")
	T0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	sec := &sandbox.Secret{Tenant: "default", Name: "gh-token", Sealed: []byte{1, 2, 3}, Fingerprint: "fp:01", CreatedAt: T0, UpdatedAt: T0}
	if err := s.CreateSecret(ctx, sec); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateSecret(ctx, sec); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("a second secret of one name: %v; want already exists", err)
	}
	s.CreateSecret(ctx, &sandbox.Secret{Tenant: "default", Name: "aws", Sealed: []byte{9}, Fingerprint: "fp:09", CreatedAt: T0, UpdatedAt: T0})
	t1 := T0.Add(time.Hour)
	if err := s.UpdateSecret(ctx, &sandbox.Secret{Tenant: "default", Name: "gh-token", Sealed: []byte{4, 5}, Fingerprint: "fp:02", UpdatedAt: t1}); err != nil {
		t.Fatal(err)
	}
	if err := s.UpdateSecret(ctx, &sandbox.Secret{Tenant: "default", Name: "nope", UpdatedAt: t1}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("update of a missing secret: %v; want not found", err)
	}
	s.Close()
	s = open(t, "kept")
	got, err := s.GetSecret(ctx, "default", "gh-token")
	if err != nil || !bytes.Equal(got.Sealed, []byte{4, 5}) || got.Fingerprint != "fp:02" || !got.CreatedAt.Equal(T0) || !got.UpdatedAt.Equal(t1) {
		t.Fatalf("the updated secret after a reopening: %+v, %v", got, err)
	}
	list, err := s.ListSecrets(ctx, "")
	if err != nil || len(list) != 2 || list[0].Name != "aws" || list[1].Name != "gh-token" {
		t.Fatalf("ListSecrets: %v, %v; want aws and gh-token, by name", list, err)
	}
	if err := s.DeleteSecret(ctx, "default", "aws"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetSecret(ctx, "default", "aws"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("a deleted secret: %v; want not found", err)
	}
	if err := s.DeleteSecret(ctx, "default", "aws"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("a second delete: %v; want not found", err)
	}
}
