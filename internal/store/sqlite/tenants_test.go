package sqlite

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/store"
)

func tenant(t *testing.T, s *Store, name string, q sandbox.Quota) {
	t.Helper()
	if err := s.CreateTenant(testCtx(t), &sandbox.Tenant{Name: name, Quota: q, CreatedAt: t0, UpdatedAt: t0}); err != nil {
		t.Fatal(err)
	}
}

func inTenant(name, tn string) *sandbox.Sandbox {
	sb := newSandbox(name, t0)
	sb.Tenant = tn
	return sb
}

func TestNamesAreUniqueWithinATenant(t *testing.T) {
	s := newStore(t)
	ctx := testCtx(t)
	tenant(t, s, "a", sandbox.Quota{})
	tenant(t, s, "b", sandbox.Quota{})
	a, b := inTenant("dev", "a"), inTenant("dev", "b")
	create(t, s, a)
	create(t, s, b)
	dup := inTenant("dev", "a")
	if _, _, err := s.CreateSandbox(ctx, dup, newOp(dup.ID, sandbox.OpCreate, "me", t0)); !errors.Is(err, errdefs.ErrAlreadyExists) {
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
	if get(t, s, b.ID).Desired == sandbox.DesiredStopped {
		t.Fatal("b's sandbox was changed by a's request")
	}
	ghost := inTenant("x", "nope")
	if _, _, err := s.CreateSandbox(ctx, ghost, newOp(ghost.ID, sandbox.OpCreate, "me", t0)); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("a sandbox of a missing tenant: %v, want not found", err)
	}
}

// Twenty creates at once into a quota of five: exactly five are made,
// whatever order the writer takes them in; the same for memory.
func TestQuotaHoldsUnderConcurrentCreates(t *testing.T) {
	s := newStore(t)
	ctx := testCtx(t)
	tenant(t, s, "few", sandbox.Quota{Sandboxes: 5})
	tenant(t, s, "small", sandbox.Quota{Resources: sandbox.Resources{MemoryBytes: 3 << 30}})
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
				sb := inTenant(fmt.Sprintf("s%d", i), tc.tenant)
				sb.Resources = tc.res
				_, _, err := s.CreateSandbox(ctx, sb, newOp(sb.ID, sandbox.OpCreate, "me", t0))
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

func TestTokensAndTenantDeletion(t *testing.T) {
	s := newStore(t)
	ctx := testCtx(t)
	tenant(t, s, "gone", sandbox.Quota{})
	tok := &sandbox.Token{ID: "abc", Name: "ci", Tenant: "gone", Role: "member", Hash: []byte("h1"), CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)}
	if err := s.CreateToken(ctx, tok); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateToken(ctx, &sandbox.Token{ID: "def", Name: "ci", Tenant: "gone", Hash: []byte("h2"), ExpiresAt: t0}); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Fatalf("a second token named ci: %v", err)
	}
	if err := s.CreateToken(ctx, &sandbox.Token{ID: "ghi", Name: "x", Tenant: "nope", Hash: []byte("h3"), ExpiresAt: t0}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("a token of a missing tenant: %v", err)
	}
	got, err := s.TokenByHash(ctx, []byte("h1"))
	if err != nil || got.Name != "ci" || !got.RevokedAt.IsZero() || !got.ExpiresAt.Equal(tok.ExpiresAt) {
		t.Fatalf("token by hash: %+v, %v", got, err)
	}
	if r, err := s.RevokeToken(ctx, "abc", t0.Add(time.Minute)); err != nil || !r.RevokedAt.Equal(t0.Add(time.Minute)) {
		t.Fatalf("revoke by id: %+v, %v", r, err)
	}
	if got, _ := s.TokenByHash(ctx, []byte("h1")); got.RevokedAt.IsZero() {
		t.Fatal("the revoked token reads as valid")
	}

	sb := inTenant("dev", "gone")
	create(t, s, sb)
	if err := s.CreatePool(ctx, &sandbox.Pool{Tenant: "gone", Name: "warm", Size: 1, CreatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateSecret(ctx, &sandbox.Secret{Tenant: "gone", Name: "key", Sealed: []byte{1}, Fingerprint: "fp", CreatedAt: t0, UpdatedAt: t0}); err != nil {
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

// A store of the schema before tenants moves into tenant "default" whole:
// records, journals (a rebuilt table must not cascade into them), exposed
// ports, pools, secrets and their uses.
func TestMigrationIntoTheDefaultTenant(t *testing.T) {
	path := filepath.Join(t.TempDir(), "corral.db")
	const before = 7 // the schema before tenants
	func() {
		old, oldVersion := migrations, SchemaVersion
		defer func() { migrations, SchemaVersion = old, oldVersion }()
		migrations, SchemaVersion = migrations[:before], before
		s, err := Open(testCtx(t), path)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		for _, q := range []string{
			`INSERT INTO sandboxes (id, name, request_id, spec, desired_state, phase, generation, created_at, updated_at, deadline, revision)
				VALUES ('id1', 'web', 'r1', '{"image":"busybox"}', 'running', 'ready', 2, 1, 1, 1, 3)`,
			`INSERT INTO operations (sandbox_id, kind, state, owner, attempt, generation, started_at, deadline)
				VALUES ('id1', 'create', 'succeeded', 'me', 0, 1, 1, 1)`,
			`INSERT INTO exposed_ports (sandbox_id, port, address, created_at) VALUES ('id1', 80, '127.0.0.1:9', 1)`,
			`INSERT INTO pools (name, size, spec, created_at) VALUES ('warm', 2, '{}', 1)`,
			`INSERT INTO secrets (name, sealed, fingerprint, created_at, updated_at) VALUES ('key', x'01', 'fp', 1, 1)`,
			`INSERT INTO credential_uses (secret, credential, sandbox_id, sandbox, time, host, port, method, path, verdict, reason, status)
				VALUES ('key', 'c', 'id1', 'web', 1, 'h', 443, 'GET', '/', 'injected', '', 200)`,
		} {
			if err := writeSQL(t, s, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
	}()
	s := openStore(t, path)
	ctx := testCtx(t)
	sb, err := s.GetSandboxByName(ctx, "default", "web")
	if err != nil || sb.ID != "id1" || sb.Generation != 2 || sb.RequestID != "r1" {
		t.Fatalf("web after the migration: %+v, %v", sb, err)
	}
	if ops, _ := s.ListOperations(ctx, "id1"); len(ops) != 1 {
		t.Errorf("web's journal after the migration: %d entries, want 1", len(ops))
	}
	if ports, _ := s.ListExposedPorts(ctx, "id1"); len(ports) != 1 {
		t.Errorf("web's exposed ports after the migration: %v", ports)
	}
	if p, err := s.GetPool(ctx, "default", "warm"); err != nil || p.Size != 2 {
		t.Errorf("pool warm: %+v, %v", p, err)
	}
	if sec, err := s.GetSecret(ctx, "default", "key"); err != nil || sec.Fingerprint != "fp" {
		t.Errorf("secret key: %+v, %v", sec, err)
	}
	if uses, _ := s.CredentialUses(ctx, "default", "key", 0, 10); len(uses) != 1 {
		t.Errorf("key's uses: %v", uses)
	}
	if _, u, err := s.GetTenant(ctx, "default"); err != nil || u.Sandboxes != 1 {
		t.Errorf("tenant default: %+v, %v", u, err)
	}
	// foreign keys are enforced again after the migration
	if err := writeSQL(t, s, `INSERT INTO operations (sandbox_id, kind, state, owner, attempt, generation, started_at, deadline)
		VALUES ('nobody', 'create', 'pending', 'me', 0, 1, 1, 1)`); err == nil {
		t.Error("an entry of no sandbox was accepted after the migration: foreign keys are off")
	}
}
