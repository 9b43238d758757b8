package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

// holdLock is the advisory lock key of the gateway that holds the store
// ("corral-g" in ASCII).
const holdLock = 0x636f7272616c2d67

// lockHeld is SQL that is true while the hold's lock is granted, to the
// session of pid when pid is not "".
func lockHeld(pid string) string {
	by := ""
	if pid != "" {
		by = " AND pid = " + pid
	}
	return fmt.Sprintf(`EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted%s
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
		AND classid::bigint = %d AND objid::bigint = %d AND objsubid = 1)`, by, uint64(holdLock)>>32, uint64(holdLock)&0xffffffff)
}

// DefaultTTL is the hold's lease when a Lease names none. The server ends
// the holder's session, and so its lock, once it has been idle for the
// TTL (idle_session_timeout): a holder whose host died or was cut off
// lets go of the store then. The holder asks its session every holdPing
// and gives the hold up itself (lost) once it has not been answered for
// half the TTL, well before the server could let another take it.
const (
	DefaultTTL = 10 * time.Second
	holdPing   = time.Second
)

// Lease is how a gateway asks for the store's hold.
type Lease struct {
	// Me is who asks; its ID is written as the lease's holder.
	Me sandbox.Replica
	// TTL is the lease's (DefaultTTL when 0).
	TTL time.Duration
	// Wait waits for the hold until ctx ends, as a replica in standby
	// does; else the hold is refused once the TTL and two seconds have
	// passed (the time a dead holder's session takes to end).
	Wait bool
	// Waiting, when set, is told once that the hold is another's, and
	// whose.
	Waiting func(holder sandbox.Replica)
}

func (l Lease) ttl() time.Duration {
	if l.TTL > 0 {
		return l.TTL
	}
	return DefaultTTL
}

// hold is a held lock: its session, kept alive until stop is closed.
type hold struct {
	conn    *sql.Conn
	stop    chan struct{}
	stopped chan struct{}
}

// Hold makes this the only store open on its database that holds it,
// until Close, and returns the lease's epoch, which grows with every
// holder: the holder owns every sandbox of the store, and only its writes
// are taken (every batch of a held store checks that its session still
// holds it). The lock is PostgreSQL's, of this session: a gateway that
// dies lets go of it with its connection (at once when its process ends,
// after the TTL when its host does). A gateway of another home or host
// than the holder's is refused (errdefs.ErrFailedPrecondition): replicas
// share one home, whose lock is the second half of the fence. lost is
// called, once, when the hold can no longer be trusted (its session ended,
// or went unanswered for half the TTL): the caller must stop acting on the
// store's sandboxes at once, as another gateway may soon hold it.
func (s *Store) Hold(ctx context.Context, l Lease, lost func(error)) (epoch int64, err error) {
	ttl := l.ttl()
	c, err := s.db.Conn(ctx)
	if err != nil {
		return 0, err
	}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	if _, err := c.ExecContext(ctx, fmt.Sprintf("SET idle_session_timeout = %d", ttl.Milliseconds())); err != nil {
		return 0, err
	}
	told := false
	for deadline := time.Now().Add(ttl + 2*time.Second); ; {
		var got bool
		if err := c.QueryRowContext(ctx, "SELECT pg_try_advisory_lock($1)", int64(holdLock)).Scan(&got); err != nil {
			return 0, err
		}
		if got {
			break
		}
		holder, known, err := s.holderOf(ctx)
		if err != nil {
			return 0, err
		}
		switch {
		case known && (holder.Home != l.Me.Home || holder.Host != l.Me.Host) && l.Me.Home != "":
			return 0, errdefs.FailedPrecondition("another gateway uses the store %s, on host %s with home %s (pid %d): its replicas run on that host with --home %s",
				Redact(s.url), holder.Host, holder.Home, holder.PID, holder.Home)
		case !l.Wait && time.Now().After(deadline):
			return 0, errdefs.FailedPrecondition("another gateway uses the store %s: stop it first", Redact(s.url))
		case known && !told && l.Waiting != nil:
			told = true
			l.Waiting(holder)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	var pid int64
	if err := c.QueryRowContext(ctx, `UPDATE lease SET epoch = epoch + 1, holder = $1, since = $2
		RETURNING epoch, pg_backend_pid()`, l.Me.ID, time.Now().UnixNano()).Scan(&epoch, &pid); err != nil {
		return 0, err
	}
	h := &hold{conn: c, stop: make(chan struct{}), stopped: make(chan struct{})}
	s.hold = h
	s.holder.Store(pid)
	go h.keep(ttl/2, lost)
	return epoch, nil
}

// keep asks the session every holdPing, and calls lost once it has
// ended, or gone unanswered for fence.
func (h *hold) keep(fence time.Duration, lost func(error)) {
	defer close(h.stopped)
	answered := time.Now()
	tick := time.NewTicker(holdPing)
	defer tick.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-tick.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), holdPing)
		err := h.conn.PingContext(ctx)
		cancel()
		if err == nil {
			answered = time.Now()
			continue
		}
		// An answer that did not come in time may yet come; any other
		// failure is a session that has ended, and its lock with it.
		switch {
		case !errors.Is(err, context.DeadlineExceeded):
			lost(fmt.Errorf("the session that holds the store ended: %w", err))
			return
		case time.Since(answered) >= fence:
			lost(fmt.Errorf("the session that holds the store went unanswered for %v", time.Since(answered).Round(time.Millisecond)))
			return
		}
	}
}

// release lets go of the hold, if it is held.
func (s *Store) release() error {
	h := s.hold
	if h == nil {
		return nil
	}
	s.hold = nil
	s.holder.Store(0)
	close(h.stop)
	<-h.stopped
	return h.conn.Close()
}
