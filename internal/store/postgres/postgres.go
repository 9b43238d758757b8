// Package postgres is the PostgreSQL store: sqlstore's SQL through pgx,
// written by sqlstore's group commit, each batch one transaction that
// first takes the database's writer lock (so that it runs alone among the
// writers of every gateway on the database, as the store's checks before
// its inserts need, and as SQLite's one writer runs), and versioned
// migrations of its own. Secrets reach it sealed by the gateway, as they
// reach SQLite.
package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/store"
	"github.com/corral-sandbox/corral/internal/store/sqlstore"
)

// Store is the PostgreSQL implementation of store.Store.
type Store struct {
	*sqlstore.Store
	db   *sql.DB
	w    *sqlstore.Writer
	r    *querier
	url  string
	hold *hold // Hold's, while it is held
	// holder is the server's pid of the session that holds the store
	// (Hold), 0 when it is not held: every batch checks that it still does.
	holder atomic.Int64
}

var _ store.Store = (*Store)(nil)

// batchWait bounds a batch's transaction, from its lock to its commit:
// a server that stops answering fails the batch's writes rather than
// holding them.
const batchWait = time.Minute

// maxConns bounds the store's connections to the server.
const maxConns = 16

// Open connects to the database at url (postgres://user@host:port/db?...)
// and brings its schema to SchemaVersion, in one transaction that holds
// a lock, so that gateways opening it at once migrate it once. A database
// with a newer schema, or with tables that are not a corral store's, is
// refused and left untouched.
func Open(ctx context.Context, url string) (*Store, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("store %s: %w", Redact(url), err)
	}
	// A transaction left open by a gateway cut off from the server ends
	// after the lease's time, with the writer lock it holds: the replica
	// that takes the store over is not kept waiting for it.
	cfg.RuntimeParams["idle_in_transaction_session_timeout"] = strconv.FormatInt(DefaultTTL.Milliseconds(), 10)
	db := stdlib.OpenDB(*cfg)
	db.SetMaxOpenConns(maxConns)
	db.SetMaxIdleConns(maxConns)
	if err := migrate(ctx, db); err != nil {
		db.Close()
		return nil, fmt.Errorf("store %s: %w", Redact(url), err)
	}
	s := &Store{db: db, r: &querier{x: db}, url: url}
	s.w = sqlstore.NewWriter(batches{db: db, holder: &s.holder})
	s.Store = sqlstore.New(backend{s})
	return s, nil
}

// Redact is url without its password, for logs and errors.
func Redact(url string) string {
	if cfg, err := pgconn.ParseConfig(url); err == nil {
		return fmt.Sprintf("postgres://%s@%s:%d/%s", cfg.User, cfg.Host, cfg.Port, cfg.Database)
	}
	return "(a PostgreSQL URL that does not parse)"
}

// migrateLock is the advisory lock key of migrations ("corral" in ASCII).
const migrateLock = 0x636f7272616c

func migrate(ctx context.Context, db *sql.DB) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock($1)", migrateLock); err != nil {
		return err
	}
	version, err := schemaVersion(ctx, tx)
	if err != nil {
		return err
	}
	if version > SchemaVersion {
		return errdefs.FailedPrecondition("schema version %d is newer than this corral supports (%d); run a newer corral", version, SchemaVersion)
	}
	if version == SchemaVersion {
		return tx.Commit()
	}
	if version == 0 {
		if _, err := tx.ExecContext(ctx, "CREATE TABLE schema_version (version BIGINT NOT NULL); INSERT INTO schema_version (version) VALUES (0)"); err != nil {
			return err
		}
	}
	for v := version; v < SchemaVersion; v++ {
		if _, err := tx.ExecContext(ctx, migrations[v]); err != nil {
			return fmt.Errorf("migrate to version %d: %w", v+1, err)
		}
	}
	if _, err := tx.ExecContext(ctx, "UPDATE schema_version SET version = $1", SchemaVersion); err != nil {
		return err
	}
	return tx.Commit()
}

// schemaVersion reads the schema version; 0 is a database without tables.
func schemaVersion(ctx context.Context, tx *sql.Tx) (int, error) {
	var tables, ours int
	err := tx.QueryRowContext(ctx, `SELECT count(*), count(*) FILTER (WHERE table_name = 'schema_version')
		FROM information_schema.tables WHERE table_schema = current_schema()`).Scan(&tables, &ours)
	if err != nil {
		return 0, err
	}
	switch {
	case ours == 0 && tables > 0:
		return 0, errdefs.FailedPrecondition("not a corral store: its schema has tables but no schema_version")
	case ours == 0:
		return 0, nil
	}
	var v int
	if err := tx.QueryRowContext(ctx, "SELECT version FROM schema_version").Scan(&v); err != nil {
		return 0, fmt.Errorf("read schema_version: %w", err)
	}
	return v, nil
}

// Close lets the queued writes commit and closes the store's
// connections, letting go of Hold's lock.
func (s *Store) Close() error {
	s.w.Close()
	return errors.Join(s.release(), s.db.Close())
}

// backend is the Store's sqlstore.Backend.
type backend struct{ s *Store }

// Write is the writer's.
func (b backend) Write(ctx context.Context, fn func(q sqlstore.Querier) error) error {
	return b.s.w.Write(ctx, fn)
}

// writerLock is the advisory lock key that every batch of every gateway's
// writer on a database takes first ("corral-w" in ASCII).
const writerLock = 0x636f7272616c2d77

// batches opens each batch's transaction on a connection of the pool:
// READ COMMITTED, whose every statement reads what committed before it,
// after the writer lock, which the transaction holds to its end (both in
// one round trip). So the batch runs alone among the database's writers
// and reads all they wrote.
type batches struct {
	db     *sql.DB
	holder *atomic.Int64
}

var beginBatch = fmt.Sprintf("BEGIN ISOLATION LEVEL READ COMMITTED; SELECT pg_advisory_xact_lock(%d)", int64(writerLock))

// stillHeld fails a batch of a store whose hold (by the session of pid)
// has ended: the writes of a gateway that lost the store are refused,
// even before it has noticed.
func stillHeld(pid int64) string {
	return fmt.Sprintf(`; DO $$ BEGIN IF NOT %s THEN
		RAISE EXCEPTION 'this gateway no longer holds the store: its writes are refused'; END IF; END $$`, lockHeld(strconv.FormatInt(pid, 10)))
}

func (b batches) Begin() (sqlstore.Batch, error) {
	ctx, cancel := context.WithTimeout(context.Background(), batchWait)
	conn, err := b.db.Conn(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	begin := beginBatch
	if pid := b.holder.Load(); pid != 0 {
		begin += stillHeld(pid)
	}
	if _, err := conn.ExecContext(ctx, begin); err != nil {
		_, _ = conn.ExecContext(ctx, "ROLLBACK")
		conn.Close()
		cancel()
		return nil, err
	}
	return &batch{querier: querier{x: conn, ctx: ctx}, conn: conn, cancel: cancel}, nil
}

// batch is one open transaction of the writer, on its connection.
type batch struct {
	querier
	conn   *sql.Conn
	cancel context.CancelFunc
}

func (b *batch) Commit() error { return b.end("COMMIT") }

func (b *batch) Rollback() error { return b.end("ROLLBACK") }

// end ends the transaction with stmt and gives the connection back.
func (b *batch) end(stmt string) error {
	defer b.cancel()
	_, err := b.conn.ExecContext(b.ctx, stmt)
	return errors.Join(err, b.conn.Close())
}

// Grow is Write: PostgreSQL's disk is its server's.
func (b backend) Grow(ctx context.Context, fn func(q sqlstore.Querier) error) error {
	return b.Write(ctx, fn)
}

func (b backend) Reads() sqlstore.Querier { return b.s.r }

func (backend) PoolLabel() string {
	return `(spec::jsonb -> 'labels' ->> '` + sandbox.LabelPool + `')`
}

// ByIndex is empty: PostgreSQL's planner needs no naming of the index.
func (backend) ByIndex(string) string { return "" }

// execer is a *sql.DB or a *sql.Tx.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// querier runs the store's SQL, its ? and ?N placeholders rewritten as
// PostgreSQL's $N. A batch's runs its statements in the batch's context:
// a caller's governs only whether its statement starts (see
// sqlstore.Writer.Write), since cancelling a statement would break the
// transaction of every write in the batch.
type querier struct {
	x   execer
	ctx context.Context // the batch's; nil: the caller's
}

// in is the context a statement asked with ctx runs in.
func (q *querier) in(ctx context.Context) (context.Context, error) {
	if q.ctx == nil {
		return ctx, nil
	}
	return q.ctx, ctx.Err()
}

func (q *querier) Exec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	ctx, err := q.in(ctx)
	if err != nil {
		return nil, err
	}
	return q.x.ExecContext(ctx, rebind(query), args...)
}

func (q *querier) Query(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	ctx, err := q.in(ctx)
	if err != nil {
		return nil, err
	}
	return q.x.QueryContext(ctx, rebind(query), args...)
}

func (q *querier) QueryRow(ctx context.Context, query string, args ...any) sqlstore.Scanner {
	ctx, err := q.in(ctx)
	if err != nil {
		return sqlstore.FailedRow(err)
	}
	return q.x.QueryRowContext(ctx, rebind(query), args...)
}

// rebound caches rebind's answers: the store's statements are a fixed set.
var rebound sync.Map

// rebind rewrites SQLite's placeholders as PostgreSQL's: ?N is $N, and a
// bare ? is one past the largest number so far (as SQLite numbers them);
// nothing inside a quoted string or name changes.
func rebind(query string) string {
	if v, ok := rebound.Load(query); ok {
		return v.(string)
	}
	var (
		b     strings.Builder
		quote byte
		n     int
	)
	for i := 0; i < len(query); i++ {
		c := query[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
			b.WriteByte(c)
		case c == '\'' || c == '"':
			quote = c
			b.WriteByte(c)
		case c == '?':
			j := i + 1
			for j < len(query) && query[j] >= '0' && query[j] <= '9' {
				j++
			}
			if j > i+1 {
				k, _ := strconv.Atoi(query[i+1 : j])
				n = max(n, k)
				b.WriteString("$" + query[i+1:j])
				i = j - 1
			} else {
				n++
				b.WriteString("$" + strconv.Itoa(n))
			}
		default:
			b.WriteByte(c)
		}
	}
	out := b.String()
	rebound.Store(query, out)
	return out
}
