package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"

	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/store"
)

const poolColumns = `tenant, name, size, spec, created_at`

func scanPool(row scanner) (*sandbox.Pool, error) {
	var (
		p       sandbox.Pool
		spec    string
		created int64
	)
	if err := row.Scan(&p.Tenant, &p.Name, &p.Size, &spec, &created); err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(spec), &p.Spec); err != nil {
		return nil, fmt.Errorf("pool %s: decode spec: %w", p.Name, err)
	}
	p.CreatedAt = fromNanos(created)
	return &p, nil
}

// CreatePool implements store.Store.
func (s *Store) CreatePool(ctx context.Context, p *sandbox.Pool) error {
	spec, err := json.Marshal(p.Spec)
	if err != nil {
		return err
	}
	return s.b.Grow(ctx, func(q Querier) error {
		if _, err := getTenant(ctx, q, p.Tenant); err != nil {
			return err
		}
		if _, err := getPool(ctx, q, p.Tenant, p.Name); err == nil {
			return errdefs.AlreadyExists("pool %q already exists", p.Name)
		} else if !errors.Is(err, errdefs.ErrNotFound) {
			return err
		}
		_, err := q.Exec(ctx, `INSERT INTO pools (`+poolColumns+`) VALUES (?,?,?,?,?)`,
			p.Tenant, p.Name, p.Size, string(spec), nanos(p.CreatedAt))
		return err
	})
}

func getPool(ctx context.Context, q Querier, tenant, name string) (*sandbox.Pool, error) {
	p, err := scanPool(q.QueryRow(ctx, `SELECT `+poolColumns+` FROM pools WHERE tenant = ? AND name = ?`, tenant, name))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errdefs.NotFound("pool %q not found", name)
	}
	return p, err
}

// GetPool implements store.Store.
func (s *Store) GetPool(ctx context.Context, tenant, name string) (*sandbox.Pool, error) {
	return getPool(ctx, s.b.Reads(), tenant, name)
}

// ListPools implements store.Store.
func (s *Store) ListPools(ctx context.Context, tenant string) ([]*sandbox.Pool, error) {
	rows, err := s.b.Reads().Query(ctx, `SELECT `+poolColumns+` FROM pools WHERE ? IN ('', tenant) ORDER BY tenant, name`, tenant)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var list []*sandbox.Pool
	for rows.Next() {
		p, err := scanPool(rows)
		if err != nil {
			return nil, err
		}
		list = append(list, p)
	}
	return list, rows.Err()
}

// DeletePool implements store.Store.
func (s *Store) DeletePool(ctx context.Context, tenant, name string) error {
	return s.b.Write(ctx, func(q Querier) error {
		res, err := q.Exec(ctx, `DELETE FROM pools WHERE tenant = ? AND name = ?`, tenant, name)
		if err != nil {
			return err
		}
		return affected(res, "pool %q not found", name)
	})
}

// ClaimSandbox implements store.Store. The one writer runs writes one
// after another, so two claims never pick the same member.
func (s *Store) ClaimSandbox(ctx context.Context, tenant, pool string, c store.Claim) (*sandbox.Sandbox, bool, error) {
	var (
		got     *sandbox.Sandbox
		claimed bool
	)
	undo := idsOf([]*sandbox.Operation{c.Op})
	err := s.b.Write(ctx, func(q Querier) error {
		undo() // a retried attempt inserts what the failed one did
		existing, err := newSandboxName(ctx, q, tenant, c.RequestID, c.Name)
		if err != nil || existing != nil {
			got = existing
			return err
		}
		if _, err := getPool(ctx, q, tenant, pool); err != nil {
			return err
		}
		var id string
		err = q.QueryRow(ctx, `SELECT id FROM sandboxes
			WHERE tenant = ? AND `+s.b.PoolLabel()+` = ? AND desired_state = ? AND phase = ?
			ORDER BY created_at, id LIMIT 1`, tenant, pool, sandbox.DesiredRunning, sandbox.PhaseReady).Scan(&id)
		if errors.Is(err, sql.ErrNoRows) {
			return store.ErrNoneReady
		}
		if err != nil {
			return err
		}
		sb, err := getSandbox(ctx, q, "id = ?", id)
		if err != nil {
			return err
		}
		sb.Name, sb.RequestID = c.Name, c.RequestID
		sb.Spec.Labels = maps.Clone(c.Labels)
		sb.UpdatedAt = c.At
		sb.Revision++
		spec, err := json.Marshal(sb.Spec)
		if err != nil {
			return err
		}
		_, err = q.Exec(ctx, `UPDATE sandboxes SET name=?, request_id=?, spec=?, updated_at=?, revision=? WHERE id=?`,
			sb.Name, nullString(sb.RequestID), string(spec), nanos(sb.UpdatedAt), sb.Revision, sb.ID)
		if err != nil {
			return err
		}
		c.Op.SandboxID, c.Op.Generation = sb.ID, sb.Generation
		if err := putOperation(ctx, q, c.Op); err != nil {
			return err
		}
		got, claimed = sb, true
		return nil
	})
	if err != nil {
		undo()
		return nil, false, err
	}
	return got, claimed, nil
}
