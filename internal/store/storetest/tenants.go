package storetest

import (
	"errors"
	"fmt"
	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/store"
	"strings"
	"sync"
	"testing"
	"time"
)

func AddTenant(t *testing.T, s store.Store, name string, q sandbox.Quota) {
	t.Helper()
	if err := s.CreateTenant(Ctx(t), &sandbox.Tenant{Name: name, Quota: q, CreatedAt: T0, UpdatedAt: T0}); err != nil {
		t.Fatal(err)
	}
}

func InTenant(name, tn string) *sandbox.Sandbox {
	sb := NewSandbox(name, T0)
	sb.Tenant = tn
	return sb
}

func testNamesAreUniqueWithinATenant(t *testing.T, open Opener) {
	s := fresh(t, open)
	ctx := Ctx(t)
	AddTenant(t, s, "a", sandbox.Quota{})
	AddTenant(t, s, "b", sandbox.Quota{})
	a, b := InTenant("dev", "a"), InTenant("dev", "b")
	Create(t, s, a)
	Create(t, s, b)
	dup := InTenant("dev", "a")
	if _, _, err := s.CreateSandbox(ctx, dup, NewOp(dup.ID, sandbox.OpCreate, "me", T0)); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Fatalf("a second dev in a: %v, want already exists", err)
	}
	if got, err := s.GetSandboxByName(ctx, "b", "dev"); err != nil || got.ID != b.ID || got.Tenant != "b" {
		t.Fatalf("dev of b = %+v, %v", got, err)
	}
	if _, err := s.GetSandboxByName(ctx, "", "dev"); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "a and b") {
		t.Fatalf("dev of any tenant: %v, want refused as taken in a and b", err)
	}
	if _, err := s.GetSandboxByName(ctx, "default", "dev"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("dev of default: %v, want not found", err)
	}
	if list, _ := s.ListSandboxes(ctx, "a"); len(list) != 1 || list[0].ID != a.ID {
		t.Fatalf("a's list: %v", list)
	}
	if list, _ := s.ListSandboxes(ctx, ""); len(list) != 2 {
		t.Fatalf("every tenant's list: %d records, want 2", len(list))
	}
	// a's caller names b's sandbox by name and by id: neither is found
	for _, key := range []string{"dev", b.ID} {
		got, err := s.MutateNamed(ctx, "a", key, func(sb *sandbox.Sandbox) (store.Mutation, error) {
			sb.Desired = sandbox.DesiredStopped
			return store.Mutation{}, nil
		})
		if key == "dev" && (err != nil || got.ID != a.ID) {
			t.Fatalf("a mutating dev reached %+v, %v; want a's", got, err)
		}
		if key == b.ID && !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("a mutating b's sandbox by id: %v, want not found", err)
		}
	}
	if Get(t, s, b.ID).Desired == sandbox.DesiredStopped {
		t.Fatal("b's sandbox was changed by a's request")
	}
	ghost := InTenant("x", "nope")
	if _, _, err := s.CreateSandbox(ctx, ghost, NewOp(ghost.ID, sandbox.OpCreate, "me", T0)); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("a sandbox of a missing tenant: %v, want not found", err)
	}
}

// Twenty creates at once into a quota of five: exactly five are made,
// whatever order the writer takes them in; the same for memory.
func testQuotaHoldsUnderConcurrentCreates(t *testing.T, open Opener) {
	s := fresh(t, open)
	ctx := Ctx(t)
	AddTenant(t, s, "few", sandbox.Quota{Sandboxes: 5})
	AddTenant(t, s, "small", sandbox.Quota{Resources: sandbox.Resources{MemoryBytes: 3 << 30}})
	for _, tc := range []struct {
		tenant string
		res    sandbox.Resources
		want   string
	}{{"few", sandbox.Resources{}, "5 sandboxes"}, {"small", sandbox.Resources{MemoryBytes: 1 << 30}, "3Gi of memory"}} {
		var (
			wg              sync.WaitGroup
			mu              sync.Mutex
			made, exhausted int
			others          []error
		)
		for i := range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sb := InTenant(fmt.Sprintf("s%d", i), tc.tenant)
				sb.Resources = tc.res
				_, _, err := s.CreateSandbox(ctx, sb, NewOp(sb.ID, sandbox.OpCreate, "me", T0))
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					made++
				case errors.Is(err, errdefs.ErrResourceExhausted) && strings.Contains(err.Error(), tc.want):
					exhausted++
				default:
					others = append(others, err)
				}
			}()
		}
		wg.Wait()
		want := 5
		if tc.tenant == "small" {
			want = 3
		}
		if made != want || exhausted != 20-want || len(others) > 0 {
			t.Errorf("%s: %d made, %d refused naming %q, others %v; want %d and %d", tc.tenant, made, exhausted, tc.want, others, want, 20-want)
		}
		_, u, err := s.GetTenant(ctx, tc.tenant)
		if err != nil || u.Sandboxes != want || u.MemoryBytes != int64(want)*tc.res.MemoryBytes {
			t.Errorf("%s's usage: %+v, %v", tc.tenant, u, err)
		}
	}
	// a policy update that grows a sandbox past the quota is refused
	list, _ := s.ListSandboxes(ctx, "small")
	_, err := s.Mutate(ctx, list[0].ID, func(sb *sandbox.Sandbox) (store.Mutation, error) {
		sb.Resources.MemoryBytes = 2 << 30
		return store.Mutation{}, nil
	})
	if !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Errorf("growing a sandbox past the quota: %v, want resource exhausted", err)
	}
}

func testTokensAndTenantDeletion(t *testing.T, open Opener) {
	s := fresh(t, open)
	ctx := Ctx(t)
	AddTenant(t, s, "gone", sandbox.Quota{})
	tok := &sandbox.Token{ID: "abc", Name: "ci", Tenant: "gone", Role: "member", Hash: []byte("h1"), CreatedAt: T0, ExpiresAt: T0.Add(time.Hour)}
	if err := s.CreateToken(ctx, tok); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateToken(ctx, &sandbox.Token{ID: "def", Name: "ci", Tenant: "gone", Hash: []byte("h2"), ExpiresAt: T0}); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Fatalf("a second token named ci: %v", err)
	}
	if err := s.CreateToken(ctx, &sandbox.Token{ID: "ghi", Name: "x", Tenant: "nope", Hash: []byte("h3"), ExpiresAt: T0}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("a token of a missing tenant: %v", err)
	}
	got, err := s.TokenByHash(ctx, []byte("h1"))
	if err != nil || got.Name != "ci" || !got.RevokedAt.IsZero() || !got.ExpiresAt.Equal(tok.ExpiresAt) {
		t.Fatalf("token by hash: %+v, %v", got, err)
	}
	if r, err := s.RevokeToken(ctx, "abc", T0.Add(time.Minute)); err != nil || !r.RevokedAt.Equal(T0.Add(time.Minute)) {
		t.Fatalf("revoke by id: %+v, %v", r, err)
	}
	if got, _ := s.TokenByHash(ctx, []byte("h1")); got.RevokedAt.IsZero() {
		t.Fatal("the revoked token reads as valid")
	}

	sb := InTenant("dev", "gone")
	Create(t, s, sb)
	if err := s.CreatePool(ctx, &sandbox.Pool{Tenant: "gone", Name: "warm", Size: 1, CreatedAt: T0}); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateSecret(ctx, &sandbox.Secret{Tenant: "gone", Name: "key", Sealed: []byte{1}, Fingerprint: "fp", CreatedAt: T0, UpdatedAt: T0}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteTenant(ctx, "gone"); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("deleting a tenant with a sandbox: %v", err)
	}
	if _, err := s.Mutate(ctx, sb.ID, func(sb *sandbox.Sandbox) (store.Mutation, error) {
		sb.Desired = sandbox.DesiredDeleted
		return store.Mutation{}, nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteTenant(ctx, "gone"); err != nil {
		t.Fatalf("deleting a tenant whose sandbox is being deleted: %v", err)
	}
	pools, _ := s.ListPools(ctx, "gone")
	secrets, _ := s.ListSecrets(ctx, "gone")
	tokens, _ := s.ListTokens(ctx, "gone")
	if len(pools)+len(secrets)+len(tokens) > 0 {
		t.Errorf("left of the tenant: %d pools, %d secrets, %d tokens", len(pools), len(secrets), len(tokens))
	}
}
