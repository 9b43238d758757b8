package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

const snapshotColumns = `id, tenant, name, state, source, source_name, spec, manifest, files, bytes, paused, created_at`

func scanSnapshot(row scanner) (*sandbox.Snapshot, error) {
	var (
		s       sandbox.Snapshot
		spec    string
		created int64
	)
	if err := row.Scan(&s.ID, &s.Tenant, &s.Name, &s.State, &s.Source, &s.SourceName, &spec, &s.Manifest,
		&s.Files, &s.Bytes, &s.Paused, &created); err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(spec), &s.Spec); err != nil {
		return nil, fmt.Errorf("snapshot %s: decode spec: %w", s.Name, err)
	}
	s.CreatedAt = fromNanos(created)
	return &s, nil
}

// CreateSnapshot implements store.Store.
func (s *Store) CreateSnapshot(ctx context.Context, snap *sandbox.Snapshot) error {
	spec, err := json.Marshal(snap.Spec)
	if err != nil {
		return err
	}
	return s.b.Grow(ctx, func(q Querier) error {
		if _, err := getTenant(ctx, q, snap.Tenant); err != nil {
			return err
		}
		var n int
		if err := q.QueryRow(ctx, `SELECT count(*) FROM snapshots WHERE tenant = ? AND name = ?`, snap.Tenant, snap.Name).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			return errdefs.AlreadyExists("snapshot %q already exists", snap.Name)
		}
		_, err := q.Exec(ctx, `INSERT INTO snapshots (`+snapshotColumns+`) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)`,
			snap.ID, snap.Tenant, snap.Name, snap.State, snap.Source, snap.SourceName, string(spec), snap.Manifest,
			snap.Files, snap.Bytes, snap.Paused, nanos(snap.CreatedAt))
		return err
	})
}

// FinishSnapshot implements store.Store.
func (s *Store) FinishSnapshot(ctx context.Context, snap *sandbox.Snapshot) error {
	return s.b.Write(ctx, func(q Querier) error {
		t, err := getTenant(ctx, q, snap.Tenant)
		if err != nil {
			return err
		}
		if t.Quota.SnapshotBytes > 0 {
			u, err := usage(ctx, q, snap.Tenant, "")
			if err != nil {
				return err
			}
			if u.SnapshotBytes += snap.Bytes; u.SnapshotBytes > t.Quota.SnapshotBytes {
				return errdefs.ResourceExhausted("tenant %s's quota of %s of snapshots is used up (this one holds %s): delete a snapshot or raise it (corral tenant update %s --max-snapshot-size)",
					snap.Tenant, sandbox.FormatBytes(t.Quota.SnapshotBytes), sandbox.FormatBytes(snap.Bytes), snap.Tenant)
			}
		}
		spec, err := json.Marshal(snap.Spec) // with its memory image, known only now
		if err != nil {
			return err
		}
		res, err := q.Exec(ctx, `UPDATE snapshots SET state = ?, manifest = ?, files = ?, bytes = ?, spec = ?, paused = '' WHERE id = ? AND state = ?`,
			sandbox.SnapshotReady, snap.Manifest, snap.Files, snap.Bytes, string(spec), snap.ID, sandbox.SnapshotCreating)
		if err != nil {
			return err
		}
		if err := affected(res, "snapshot %q is no longer being taken", snap.Name); err != nil {
			return err
		}
		snap.State, snap.Paused = sandbox.SnapshotReady, ""
		return nil
	})
}

// GetSnapshot implements store.Store.
func (s *Store) GetSnapshot(ctx context.Context, tenant, nameOrID string) (*sandbox.Snapshot, error) {
	snap, err := scanSnapshot(s.b.Reads().QueryRow(ctx, `SELECT `+snapshotColumns+` FROM snapshots
		WHERE ? IN ('', tenant) AND (name = ? OR id = ?) ORDER BY name = ? DESC LIMIT 1`, tenant, nameOrID, nameOrID, nameOrID))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errdefs.NotFound("snapshot %q not found", nameOrID)
	}
	return snap, err
}

// ListSnapshots implements store.Store.
func (s *Store) ListSnapshots(ctx context.Context, tenant string) ([]*sandbox.Snapshot, error) {
	rows, err := s.b.Reads().Query(ctx, `SELECT `+snapshotColumns+` FROM snapshots WHERE ? IN ('', tenant) ORDER BY created_at, id`, tenant)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var list []*sandbox.Snapshot
	for rows.Next() {
		snap, err := scanSnapshot(rows)
		if err != nil {
			return nil, err
		}
		list = append(list, snap)
	}
	return list, rows.Err()
}

// DeleteSnapshot implements store.Store.
func (s *Store) DeleteSnapshot(ctx context.Context, id string) error {
	return s.b.Write(ctx, func(q Querier) error {
		res, err := q.Exec(ctx, `DELETE FROM snapshots WHERE id = ?`, id)
		if err != nil {
			return err
		}
		return affected(res, "snapshot %q not found", id)
	})
}
