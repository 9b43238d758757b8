package sqlstore

import (
	"context"
	"database/sql"
	"errors"

	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

const secretColumns = `tenant, name, sealed, fingerprint, created_at, updated_at`

func scanSecret(row scanner) (*sandbox.Secret, error) {
	var (
		s                sandbox.Secret
		created, updated int64
	)
	if err := row.Scan(&s.Tenant, &s.Name, &s.Sealed, &s.Fingerprint, &created, &updated); err != nil {
		return nil, err
	}
	s.CreatedAt, s.UpdatedAt = fromNanos(created), fromNanos(updated)
	return &s, nil
}

// CreateSecret implements store.Store.
func (s *Store) CreateSecret(ctx context.Context, sec *sandbox.Secret) error {
	return s.b.Grow(ctx, func(q Querier) error {
		if _, err := getTenant(ctx, q, sec.Tenant); err != nil {
			return err
		}
		if _, err := getSecret(ctx, q, sec.Tenant, sec.Name); err == nil {
			return errdefs.AlreadyExists("secret %q already exists", sec.Name)
		} else if !errors.Is(err, errdefs.ErrNotFound) {
			return err
		}
		_, err := q.Exec(ctx, `INSERT INTO secrets (`+secretColumns+`) VALUES (?,?,?,?,?,?)`,
			sec.Tenant, sec.Name, sec.Sealed, sec.Fingerprint, nanos(sec.CreatedAt), nanos(sec.UpdatedAt))
		return err
	})
}

// UpdateSecret implements store.Store.
func (s *Store) UpdateSecret(ctx context.Context, sec *sandbox.Secret) error {
	return s.b.Write(ctx, func(q Querier) error {
		res, err := q.Exec(ctx, `UPDATE secrets SET sealed = ?, fingerprint = ?, updated_at = ? WHERE tenant = ? AND name = ?`,
			sec.Sealed, sec.Fingerprint, nanos(sec.UpdatedAt), sec.Tenant, sec.Name)
		if err != nil {
			return err
		}
		return affected(res, "secret %q not found", sec.Name)
	})
}

func getSecret(ctx context.Context, q Querier, tenant, name string) (*sandbox.Secret, error) {
	sec, err := scanSecret(q.QueryRow(ctx, `SELECT `+secretColumns+` FROM secrets WHERE tenant = ? AND name = ?`, tenant, name))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errdefs.NotFound("secret %q not found", name)
	}
	return sec, err
}

// GetSecret implements store.Store.
func (s *Store) GetSecret(ctx context.Context, tenant, name string) (*sandbox.Secret, error) {
	return getSecret(ctx, s.b.Reads(), tenant, name)
}

// ListSecrets implements store.Store.
func (s *Store) ListSecrets(ctx context.Context, tenant string) ([]*sandbox.Secret, error) {
	rows, err := s.b.Reads().Query(ctx, `SELECT `+secretColumns+` FROM secrets WHERE ? IN ('', tenant) ORDER BY tenant, name`, tenant)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var list []*sandbox.Secret
	for rows.Next() {
		sec, err := scanSecret(rows)
		if err != nil {
			return nil, err
		}
		list = append(list, sec)
	}
	return list, rows.Err()
}

// DeleteSecret implements store.Store.
func (s *Store) DeleteSecret(ctx context.Context, tenant, name string) error {
	return s.b.Write(ctx, func(q Querier) error {
		res, err := q.Exec(ctx, `DELETE FROM secrets WHERE tenant = ? AND name = ?`, tenant, name)
		if err != nil {
			return err
		}
		if _, err := q.Exec(ctx, `DELETE FROM credential_uses WHERE tenant = ? AND secret = ?`, tenant, name); err != nil {
			return err
		}
		return affected(res, "secret %q not found", name)
	})
}

// affected is errdefs.ErrNotFound (format, args) when res changed no row.
func affected(res sql.Result, format string, args ...any) error {
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		return errdefs.NotFound(format, args...)
	}
	return nil
}
