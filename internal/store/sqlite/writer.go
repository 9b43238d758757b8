package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"sync"

	"github.com/corral-sandbox/corral/internal/store/sqlstore"
)

// The writer is sqlstore's group commit on the only writing connection:
// each batch one BEGIN IMMEDIATE transaction (synchronous=FULL: one fsync
// of the WAL for all of it), before the disk reserve's rule (reserve.go).

// writer is the store's writer and its reserve.
type writer struct {
	*sqlstore.Writer
	q       *stmts // the writing connection's statements
	conn    *sql.Conn
	reserve *reserve
}

func newWriter(conn *sql.Conn, r *reserve) *writer {
	q := newStmts(conn)
	return &writer{Writer: sqlstore.NewWriter(batches{q}), q: q, conn: conn, reserve: r}
}

// write is Write, and a write that the full disk refused (and rolled
// back) is tried once more on the store's reserve, freed for it.
func (w *writer) write(ctx context.Context, fn func(q sqlstore.Querier) error) error {
	err := w.Write(ctx, fn)
	if diskFull(err) && w.reserve.release() {
		err = w.Write(ctx, fn)
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

// batches opens each batch's transaction on the writing connection, the
// only one that writes: BEGIN IMMEDIATE takes SQLite's write lock at once.
type batches struct{ q *stmts }

func (b batches) Begin() (sqlstore.Batch, error) {
	if _, err := b.q.Exec(bg, "BEGIN IMMEDIATE"); err != nil {
		return nil, err
	}
	return batch{b.q}, nil
}

// batch is the open transaction of the writing connection.
type batch struct{ *stmts }

func (b batch) Commit() error {
	_, err := b.Exec(bg, "COMMIT")
	return err
}

func (b batch) Rollback() error {
	_, err := b.Exec(bg, "ROLLBACK")
	return err
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
		return sqlstore.FailedRow(err)
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
