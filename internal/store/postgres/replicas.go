package postgres

import (
	"context"
	"database/sql"
	"time"

	"github.com/corral-sandbox/corral/internal/sandbox"
)

// beat is how often a replica says it is alive; forgetAfter is how long a
// replica's row stays once it has stopped.
const (
	beat        = time.Second
	forgetAfter = time.Minute
)

// Join puts me among the store's replicas and says so every second until
// leave, which takes its row away. A row not beaten for a minute is taken
// away by any replica's beat.
func (s *Store) Join(ctx context.Context, me sandbox.Replica) (leave func(), err error) {
	if err := s.beat(ctx, me); err != nil {
		return nil, err
	}
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(beat)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), beat)
			_ = s.beat(ctx, me) // a missed beat shows as the row's age
			cancel()
		}
	}()
	return func() {
		close(stop)
		<-stopped
		ctx, cancel := context.WithTimeout(context.Background(), beat)
		defer cancel()
		_, _ = s.db.ExecContext(ctx, "DELETE FROM replicas WHERE id = $1", me.ID)
	}, nil
}

// beat writes me's row as seen now and forgets replicas long gone. It
// writes outside the writer's batches: the rows are the replicas' own,
// which no check of the store reads.
func (s *Store) beat(ctx context.Context, me sandbox.Replica) error {
	now := time.Now()
	_, err := s.db.ExecContext(ctx, `INSERT INTO replicas (id, pid, host, home, listen, started_at, seen_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7)
		ON CONFLICT (id) DO UPDATE SET seen_at = excluded.seen_at`,
		me.ID, me.PID, me.Host, me.Home, me.Listen, me.StartedAt.UnixNano(), now.UnixNano())
	if err != nil {
		return err
	}
	_, err = s.db.ExecContext(ctx, "DELETE FROM replicas WHERE seen_at < $1", now.Add(-forgetAfter).UnixNano())
	return err
}

// Replicas lists the store's replicas, the leader first, then by start:
// the leader is the lease's holder while its session holds the lock.
func (s *Store) Replicas(ctx context.Context) ([]sandbox.Replica, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT r.id, r.pid, r.host, r.home, r.listen, r.started_at, r.seen_at,
			r.id = l.holder AND `+lockHeld("")+`, l.epoch, l.since
		FROM replicas r CROSS JOIN lease l ORDER BY 8 DESC, r.started_at`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []sandbox.Replica
	for rows.Next() {
		var (
			r                    sandbox.Replica
			started, seen, since int64
			epoch                int64
		)
		if err := rows.Scan(&r.ID, &r.PID, &r.Host, &r.Home, &r.Listen, &started, &seen, &r.Leader, &epoch, &since); err != nil {
			return nil, err
		}
		r.StartedAt, r.SeenAt = time.Unix(0, started), time.Unix(0, seen)
		if r.Leader {
			r.Epoch, r.Since = epoch, time.Unix(0, since)
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// holderOf is the replica that the lease names, when it has a row.
func (s *Store) holderOf(ctx context.Context) (sandbox.Replica, bool, error) {
	var r sandbox.Replica
	err := s.db.QueryRowContext(ctx, `SELECT r.id, r.pid, r.host, r.home FROM lease l JOIN replicas r ON r.id = l.holder`).
		Scan(&r.ID, &r.PID, &r.Host, &r.Home)
	if err == sql.ErrNoRows {
		return r, false, nil
	}
	return r, err == nil, err
}
