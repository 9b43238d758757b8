package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/corral-sandbox/corral/internal/errdefs"
)

// holdLock is the advisory lock key of the gateway that uses the store
// ("corral-g" in ASCII).
const holdLock = 0x636f7272616c2d67

// The hold's lease. The server ends the holder's session, and so its lock,
// once it has been idle for HoldTTL (idle_session_timeout): a holder whose
// host died lets go of the store then. The holder asks its session every
// holdPing, and gives the hold up itself (lost) once it has not been
// answered for holdFence, well before the server could let another take
// it. A new holder waits up to HoldTTL and a little for the last one's
// session to end.
const (
	HoldTTL   = 10 * time.Second
	holdPing  = time.Second
	holdFence = HoldTTL / 2
	holdWait  = HoldTTL + 2*time.Second
)

// hold is a held lock: its session, kept alive until stop is closed.
type hold struct {
	conn    *sql.Conn
	stop    chan struct{}
	stopped chan struct{}
}

// Hold makes this the only store open on its database that holds it,
// until Close: a second gateway is refused (errdefs.ErrFailedPrecondition)
// rather than let two gateways reconcile the same records, each settling
// the other's journal. The lock is PostgreSQL's, of this session: a
// gateway that dies lets go of it with its connection (at once when its
// process ends, after HoldTTL when its host does). lost is called, once,
// when the hold can no longer be trusted (the session went unanswered
// for half of HoldTTL): the caller must stop acting on the store's
// sandboxes at once, as another gateway may soon hold it.
func (s *Store) Hold(ctx context.Context, lost func(error)) error {
	c, err := s.db.Conn(ctx)
	if err != nil {
		return err
	}
	if _, err := c.ExecContext(ctx, fmt.Sprintf("SET idle_session_timeout = %d", HoldTTL.Milliseconds())); err != nil {
		c.Close()
		return err
	}
	for deadline := time.Now().Add(holdWait); ; {
		var got bool
		if err := c.QueryRowContext(ctx, "SELECT pg_try_advisory_lock($1)", int64(holdLock)).Scan(&got); err != nil {
			c.Close()
			return err
		}
		if got {
			break
		}
		if time.Now().After(deadline) {
			c.Close()
			return errdefs.FailedPrecondition("another gateway uses the store %s: one gateway per store (stop it first)", Redact(s.url))
		}
		select {
		case <-ctx.Done():
			c.Close()
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	var pid int64
	if err := c.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		c.Close()
		return err
	}
	h := &hold{conn: c, stop: make(chan struct{}), stopped: make(chan struct{})}
	s.hold = h
	s.holder.Store(pid)
	go h.keep(lost)
	return nil
}

// keep asks the session every holdPing, and calls lost once it has
// ended, or gone unanswered for holdFence.
func (h *hold) keep(lost func(error)) {
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
		case time.Since(answered) >= holdFence:
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
