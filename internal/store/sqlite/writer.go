package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/corral-sandbox/corral/internal/metrics"
	"github.com/corral-sandbox/corral/internal/store/sqlstore"
)

// Group commit. Every write transaction of the store is a job for one
// writer goroutine, which owns the only writing connection. It takes the
// jobs that queued while it was busy, runs each as a SAVEPOINT inside one
// BEGIN IMMEDIATE transaction (a job that fails rolls back only its own
// savepoint and gets its own error), commits once (one fsync of the WAL,
// synchronous=FULL), and only then answers each job's caller. An answered
// write is therefore durable, and writes commit in the order they queued.

// maxBatch bounds the jobs of one commit.
const maxBatch = 256

// errClosed answers a write asked of a closed store.
var errClosed = errors.New("the store is closed")

// job is one queued write transaction.
type job struct {
	fn    func(q sqlstore.Querier) error
	state atomic.Int32 // jobQueued, then jobTaken by the writer or jobAbandoned by its caller
	done  chan error   // capacity 1: the outcome, sent once the batch committed
}

const (
	jobQueued int32 = iota
	jobTaken
	jobAbandoned
)

// writer runs the jobs on the writing connection.
type writer struct {
	q       *stmts // the writing connection's statements
	conn    *sql.Conn
	reserve *reserve

	mu     sync.RWMutex // guards closed against sends on jobs
	closed bool
	jobs   chan *job
	exited chan struct{}

	writes, commits atomic.Int64 // for tests; the metrics count the same
}

func newWriter(conn *sql.Conn, r *reserve) *writer {
	w := &writer{q: newStmts(conn), conn: conn, reserve: r, jobs: make(chan *job, maxBatch), exited: make(chan struct{})}
	go w.run()
	return w
}

// write runs fn as one write transaction and returns once it is committed
// (or failed). ctx bounds only the wait in the queue: once the writer has
// taken the job, write waits for its outcome, so a nil error always means
// a durable write and a cancelled caller never leaves a write half-known.
// A write that the full disk refused (and rolled back) is tried once more
// on the store's reserve, freed for it.
func (w *writer) write(ctx context.Context, fn func(q sqlstore.Querier) error) error {
	err := w.queue(ctx, fn)
	if diskFull(err) && w.reserve.release() {
		err = w.queue(ctx, fn)
	}
	if diskFull(err) {
		return w.reserve.fullDisk(err)
	}
	return err
}

// grow is write for a write that adds a sandbox or a pool: refused at once
// while the disk is full, so that the reserve stays for the writes that
// end sandboxes.
func (w *writer) grow(ctx context.Context, fn func(q sqlstore.Querier) error) error {
	if w.reserve.full() {
		return w.reserve.fullDisk(errors.New("the store's reserve is in use"))
	}
	return w.write(ctx, fn)
}

func (w *writer) queue(ctx context.Context, fn func(q sqlstore.Querier) error) error {
	j := &job{fn: fn, done: make(chan error, 1)}
	w.mu.RLock()
	if w.closed {
		w.mu.RUnlock()
		return errClosed
	}
	select {
	case w.jobs <- j:
	case <-ctx.Done():
		w.mu.RUnlock()
		return ctx.Err()
	}
	w.mu.RUnlock()
	select {
	case err := <-j.done:
		return err
	case <-ctx.Done():
		if j.state.CompareAndSwap(jobQueued, jobAbandoned) {
			return ctx.Err()
		}
		return <-j.done
	}
}

// close lets the queued jobs finish and stops the writer.
func (w *writer) close() {
	w.mu.Lock()
	if !w.closed {
		w.closed = true
		close(w.jobs)
	}
	w.mu.Unlock()
	<-w.exited
}

func (w *writer) run() {
	defer close(w.exited)
	var batch []*job
	for {
		if len(batch) == 0 {
			j, ok := <-w.jobs
			if !ok {
				return
			}
			batch = append(batch, j)
		}
	drain:
		for len(batch) < maxBatch {
			select {
			case j, ok := <-w.jobs:
				if !ok {
					break drain
				}
				batch = append(batch, j)
			default:
				break drain
			}
		}
		batch = w.commit(batch)
	}
}

// commit runs a batch in one transaction and answers its jobs. When the
// transaction itself breaks, the jobs run so far get the error and the
// ones not run yet are returned, to go into the next batch.
func (w *writer) commit(batch []*job) (rest []*job) {
	var ran []*job
	outcomes := make([]error, 0, len(batch))
	answer := func(commitErr error) {
		for i, j := range ran {
			err := outcomes[i]
			if err == nil && commitErr != nil {
				err = commitErr
			}
			j.done <- err
		}
	}
	if _, err := w.q.Exec(bg, "BEGIN IMMEDIATE"); err != nil {
		for _, j := range batch {
			if j.state.CompareAndSwap(jobQueued, jobTaken) {
				j.done <- fmt.Errorf("begin: %w", err)
			}
		}
		return nil
	}
	for i, j := range batch {
		if !j.state.CompareAndSwap(jobQueued, jobTaken) {
			continue // its caller gave up waiting in the queue
		}
		ran = append(ran, j)
		err, broken := w.savepoint(j.fn)
		outcomes = append(outcomes, err)
		if broken != nil {
			_, _ = w.q.Exec(bg, "ROLLBACK")
			answer(fmt.Errorf("the transaction it was part of failed: %w", broken))
			return batch[i+1:]
		}
	}
	if len(ran) == 0 { // every caller gave up: nothing to commit
		_, _ = w.q.Exec(bg, "ROLLBACK")
		return nil
	}
	if _, err := w.q.Exec(bg, "COMMIT"); err != nil {
		_, _ = w.q.Exec(bg, "ROLLBACK")
		answer(fmt.Errorf("commit: %w", err))
		return nil
	}
	w.writes.Add(int64(len(ran)))
	w.commits.Add(1)
	metrics.StoreCommitted(len(ran))
	answer(nil)
	return nil
}

// savepoint runs fn in a savepoint, rolling it back when fn fails. broken
// is set when the enclosing transaction could not survive the failure.
func (w *writer) savepoint(fn func(q sqlstore.Querier) error) (err, broken error) {
	if _, err := w.q.Exec(bg, "SAVEPOINT job"); err != nil {
		return err, err
	}
	if err := fn(w.q); err != nil {
		if _, rerr := w.q.Exec(bg, "ROLLBACK TO job"); rerr != nil {
			return err, rerr
		}
		if _, rerr := w.q.Exec(bg, "RELEASE job"); rerr != nil {
			return err, rerr
		}
		return err, nil
	}
	if _, err := w.q.Exec(bg, "RELEASE job"); err != nil {
		return err, err
	}
	return nil, nil
}

// bg is the context of every statement: a caller's context governs only its
// wait (see write), and a statement without a cancellable context costs the
// driver no watching goroutine.
var bg = context.Background()

// preparer is a *sql.DB (the read pool) or a *sql.Conn (the writer's).
type preparer interface {
	PrepareContext(ctx context.Context, query string) (*sql.Stmt, error)
}

// stmts runs queries through statements prepared once and reused.
type stmts struct {
	p     preparer
	cache sync.Map // query text -> *sql.Stmt
}

func newStmts(p preparer) *stmts { return &stmts{p: p} }

// stmt returns the statement of query, preparing it the first time, unless
// ctx has ended.
func (s *stmts) stmt(ctx context.Context, query string) (*sql.Stmt, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if st, ok := s.cache.Load(query); ok {
		return st.(*sql.Stmt), nil
	}
	st, err := s.p.PrepareContext(bg, query)
	if err != nil {
		return nil, err
	}
	if prev, loaded := s.cache.LoadOrStore(query, st); loaded {
		st.Close()
		return prev.(*sql.Stmt), nil
	}
	return st, nil
}

func (s *stmts) Exec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	st, err := s.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	return st.ExecContext(bg, args...)
}

func (s *stmts) Query(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	st, err := s.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	return st.QueryContext(bg, args...)
}

func (s *stmts) QueryRow(ctx context.Context, query string, args ...any) sqlstore.Scanner {
	st, err := s.stmt(ctx, query)
	if err != nil {
		return errRow{err}
	}
	return st.QueryRowContext(bg, args...)
}

// close closes every prepared statement.
func (s *stmts) close() {
	s.cache.Range(func(_, st any) bool {
		st.(*sql.Stmt).Close()
		return true
	})
}

// errRow is a row that could not be queried.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }
