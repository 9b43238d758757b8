package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

const tenantColumns = `name, max_sandboxes, max_memory, max_cpu_millis, max_disk, max_snapshot_bytes, created_at, updated_at`

func scanTenant(row scanner) (*sandbox.Tenant, error) {
	var (
		t                sandbox.Tenant
		created, updated int64
	)
	if err := row.Scan(&t.Name, &t.Quota.Sandboxes, &t.Quota.MemoryBytes, &t.Quota.CPUMillis, &t.Quota.DiskBytes, &t.Quota.SnapshotBytes,
		&created, &updated); err != nil {
		return nil, err
	}
	t.CreatedAt, t.UpdatedAt = fromNanos(created), fromNanos(updated)
	return &t, nil
}

func getTenant(ctx context.Context, q Querier, name string) (*sandbox.Tenant, error) {
	t, err := scanTenant(q.QueryRow(ctx, `SELECT `+tenantColumns+` FROM tenants WHERE name = ?`, name))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errdefs.NotFound("tenant %q not found", name)
	}
	return t, err
}

// usage is what the sandboxes of tenant hold, but the one with id except.
func usage(ctx context.Context, q Querier, tenant, except string) (sandbox.Usage, error) {
	var u sandbox.Usage
	err := q.QueryRow(ctx, `SELECT count(*), coalesce(sum(memory), 0), coalesce(sum(cpu_millis), 0), coalesce(sum(disk), 0)
		FROM sandboxes WHERE tenant = ? AND id != ?`, tenant, except).Scan(&u.Sandboxes, &u.MemoryBytes, &u.CPUMillis, &u.DiskBytes)
	if err != nil {
		return u, err
	}
	err = q.QueryRow(ctx, `SELECT coalesce(sum(bytes), 0) FROM snapshots WHERE tenant = ? AND state = ?`,
		tenant, sandbox.SnapshotReady).Scan(&u.SnapshotBytes)
	return u, err
}

// withinQuota checks, in a write, that tenant exists and that its
// sandboxes stay within its quota when the one with id holds res (id ""
// is a new one), res given the defaults where the quota bounds what it
// leaves unlimited. The one writer runs writes one after another, so two
// creates never both take the last place.
func withinQuota(ctx context.Context, q Querier, tenant, id string, res *sandbox.Resources) error {
	t, err := getTenant(ctx, q, tenant)
	if err != nil || t.Quota == (sandbox.Quota{}) {
		return err // no bound: nothing to sum
	}
	*res = res.Within(t.Quota)
	u, err := usage(ctx, q, tenant, id)
	if err != nil {
		return err
	}
	u.Sandboxes++
	u.MemoryBytes += res.MemoryBytes
	u.CPUMillis += res.CPUMillis
	u.DiskBytes += res.DiskBytes
	if over := u.Exceeds(t.Quota); over != "" {
		return errdefs.ResourceExhausted("tenant %s's quota of %s is used up: delete a sandbox or raise it (corral tenant update %s)", tenant, over, tenant)
	}
	return nil
}

// CreateTenant implements store.Store.
func (s *Store) CreateTenant(ctx context.Context, t *sandbox.Tenant) error {
	return s.b.Grow(ctx, func(q Querier) error {
		if _, err := getTenant(ctx, q, t.Name); err == nil {
			return errdefs.AlreadyExists("tenant %q already exists", t.Name)
		} else if !errors.Is(err, errdefs.ErrNotFound) {
			return err
		}
		_, err := q.Exec(ctx, `INSERT INTO tenants (`+tenantColumns+`) VALUES (?,?,?,?,?,?,?,?)`, t.Name, t.Quota.Sandboxes,
			t.Quota.MemoryBytes, t.Quota.CPUMillis, t.Quota.DiskBytes, t.Quota.SnapshotBytes, nanos(t.CreatedAt), nanos(t.UpdatedAt))
		return err
	})
}

// UpdateTenant implements store.Store.
func (s *Store) UpdateTenant(ctx context.Context, t *sandbox.Tenant) error {
	return s.b.Write(ctx, func(q Querier) error {
		res, err := q.Exec(ctx, `UPDATE tenants SET max_sandboxes = ?, max_memory = ?, max_cpu_millis = ?, max_disk = ?, max_snapshot_bytes = ?,
			updated_at = ? WHERE name = ?`, t.Quota.Sandboxes, t.Quota.MemoryBytes, t.Quota.CPUMillis, t.Quota.DiskBytes, t.Quota.SnapshotBytes,
			nanos(t.UpdatedAt), t.Name)
		if err != nil {
			return err
		}
		return affected(res, "tenant %q not found", t.Name)
	})
}

// GetTenant implements store.Store.
func (s *Store) GetTenant(ctx context.Context, name string) (*sandbox.Tenant, sandbox.Usage, error) {
	t, err := getTenant(ctx, s.b.Reads(), name)
	if err != nil {
		return nil, sandbox.Usage{}, err
	}
	u, err := usage(ctx, s.b.Reads(), name, "")
	return t, u, err
}

// ListTenants implements store.Store.
func (s *Store) ListTenants(ctx context.Context) ([]*sandbox.Tenant, error) {
	rows, err := s.b.Reads().Query(ctx, `SELECT `+tenantColumns+` FROM tenants ORDER BY name`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var list []*sandbox.Tenant
	for rows.Next() {
		t, err := scanTenant(rows)
		if err != nil {
			return nil, err
		}
		list = append(list, t)
	}
	return list, rows.Err()
}

// DeleteTenant implements store.Store.
func (s *Store) DeleteTenant(ctx context.Context, name string) error {
	return s.b.Write(ctx, func(q Querier) error {
		var live int
		if err := q.QueryRow(ctx, `SELECT count(*) FROM sandboxes WHERE tenant = ? AND desired_state != ?`,
			name, sandbox.DesiredDeleted).Scan(&live); err != nil {
			return err
		}
		if live > 0 {
			what := fmt.Sprintf("%d sandboxes", live)
			if live == 1 {
				what = "a sandbox"
			}
			return errdefs.FailedPrecondition("tenant %q has %s: delete them first, or the tenant with --force", name, what)
		}
		res, err := q.Exec(ctx, `DELETE FROM tenants WHERE name = ?`, name)
		if err != nil {
			return err
		}
		if err := affected(res, "tenant %q not found", name); err != nil {
			return err
		}
		for _, table := range []string{"pools", "secrets", "credential_uses", "tokens", "snapshots"} {
			if _, err := q.Exec(ctx, `DELETE FROM `+table+` WHERE tenant = ?`, name); err != nil {
				return err
			}
		}
		return nil
	})
}

const tokenColumns = `id, name, tenant, role, hash, created_at, expires_at, revoked_at`

func scanToken(row scanner) (*sandbox.Token, error) {
	var (
		t                sandbox.Token
		created, expires int64
		revoked          sql.NullInt64
	)
	if err := row.Scan(&t.ID, &t.Name, &t.Tenant, &t.Role, &t.Hash, &created, &expires, &revoked); err != nil {
		return nil, err
	}
	t.CreatedAt, t.ExpiresAt = fromNanos(created), fromNanos(expires)
	if revoked.Valid {
		t.RevokedAt = fromNanos(revoked.Int64)
	}
	return &t, nil
}

// CreateToken implements store.Store.
func (s *Store) CreateToken(ctx context.Context, t *sandbox.Token) error {
	return s.b.Grow(ctx, func(q Querier) error {
		if _, err := getTenant(ctx, q, t.Tenant); err != nil {
			return err
		}
		var taken int
		if err := q.QueryRow(ctx, `SELECT count(*) FROM tokens WHERE name = ?`, t.Name).Scan(&taken); err != nil {
			return err
		} else if taken > 0 {
			return errdefs.AlreadyExists("token %q already exists", t.Name)
		}
		_, err := q.Exec(ctx, `INSERT INTO tokens (`+tokenColumns+`) VALUES (?,?,?,?,?,?,?,NULL)`,
			t.ID, t.Name, t.Tenant, t.Role, t.Hash, nanos(t.CreatedAt), nanos(t.ExpiresAt))
		return err
	})
}

// TokenByHash implements store.Store.
func (s *Store) TokenByHash(ctx context.Context, hash []byte) (*sandbox.Token, error) {
	t, err := scanToken(s.b.Reads().QueryRow(ctx, `SELECT `+tokenColumns+` FROM tokens WHERE hash = ?`, hash))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errdefs.NotFound("no such token")
	}
	return t, err
}

// ListTokens implements store.Store.
func (s *Store) ListTokens(ctx context.Context, tenant string) ([]*sandbox.Token, error) {
	rows, err := s.b.Reads().Query(ctx, `SELECT `+tokenColumns+` FROM tokens WHERE ? IN ('', tenant) ORDER BY created_at, id`, tenant)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var list []*sandbox.Token
	for rows.Next() {
		t, err := scanToken(rows)
		if err != nil {
			return nil, err
		}
		list = append(list, t)
	}
	return list, rows.Err()
}

// RevokeToken implements store.Store.
func (s *Store) RevokeToken(ctx context.Context, nameOrID string, at time.Time) (*sandbox.Token, error) {
	var t *sandbox.Token
	err := s.b.Write(ctx, func(q Querier) error {
		var err error
		t, err = scanToken(q.QueryRow(ctx, `SELECT `+tokenColumns+` FROM tokens WHERE name = ? OR id = ?`, nameOrID, nameOrID))
		if errors.Is(err, sql.ErrNoRows) {
			return errdefs.NotFound("token %q not found", nameOrID)
		}
		if err != nil || !t.RevokedAt.IsZero() {
			return err
		}
		t.RevokedAt = at
		_, err = q.Exec(ctx, `UPDATE tokens SET revoked_at = ? WHERE id = ?`, nanos(at), t.ID)
		return err
	})
	return t, err
}
