package sqlite

import (
	"path/filepath"
	"testing"
)

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
