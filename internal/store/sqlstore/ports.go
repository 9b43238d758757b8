package sqlstore

import (
	"context"
	"database/sql"

	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

// AddExposedPort implements store.Store.
func (s *Store) AddExposedPort(ctx context.Context, p sandbox.ExposedPort) error {
	return s.b.Grow(ctx, func(q Querier) error {
		var n int
		if err := q.QueryRow(ctx, `SELECT count(*) FROM sandboxes WHERE id = ?`, p.SandboxID).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return errdefs.NotFound("sandbox %s not found", p.SandboxID)
		}
		var taken string
		err := q.QueryRow(ctx, `SELECT address FROM exposed_ports WHERE sandbox_id = ? AND port = ?`, p.SandboxID, p.Port).Scan(&taken)
		if err == nil {
			return errdefs.AlreadyExists("port %d of sandbox %s is already exposed at %s", p.Port, p.SandboxID, taken)
		}
		if err != sql.ErrNoRows {
			return err
		}
		err = q.QueryRow(ctx, `SELECT sandbox_id FROM exposed_ports WHERE address = ?`, p.Address).Scan(&taken)
		if err == nil {
			return errdefs.AlreadyExists("address %s already serves a port of sandbox %s", p.Address, taken)
		}
		if err != sql.ErrNoRows {
			return err
		}
		_, err = q.Exec(ctx, `INSERT INTO exposed_ports (sandbox_id, port, address, created_at) VALUES (?,?,?,?)`,
			p.SandboxID, p.Port, p.Address, nanos(p.CreatedAt))
		return err
	})
}

// RemoveExposedPort implements store.Store.
func (s *Store) RemoveExposedPort(ctx context.Context, sandboxID string, port int) error {
	return s.b.Write(ctx, func(q Querier) error {
		res, err := q.Exec(ctx, `DELETE FROM exposed_ports WHERE sandbox_id = ? AND port = ?`, sandboxID, port)
		if err != nil {
			return err
		}
		return affected(res, "port %d of sandbox %s is not exposed", port, sandboxID)
	})
}

// ListExposedPorts implements store.Store.
func (s *Store) ListExposedPorts(ctx context.Context, sandboxID string) ([]sandbox.ExposedPort, error) {
	rows, err := s.b.Reads().Query(ctx, `SELECT sandbox_id, port, address, created_at FROM exposed_ports
		WHERE ? = '' OR sandbox_id = ? ORDER BY created_at, sandbox_id, port`, sandboxID, sandboxID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var list []sandbox.ExposedPort
	for rows.Next() {
		var p sandbox.ExposedPort
		var at int64
		if err := rows.Scan(&p.SandboxID, &p.Port, &p.Address, &at); err != nil {
			return nil, err
		}
		p.CreatedAt = fromNanos(at)
		list = append(list, p)
	}
	return list, rows.Err()
}
