// Package postgres is the PostgreSQL store, for several gateways on one
// database: sqlstore's SQL through pgx, every write a SERIALIZABLE
// transaction (PostgreSQL then keeps it as if it ran alone, which is what
// the store's checks before its inserts need), retried when PostgreSQL
// gives up on one, and versioned migrations of its own. Secrets reach it
// sealed by the gateway, as they reach SQLite.
package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver

	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/store"
	"github.com/corral-sandbox/corral/internal/store/sqlstore"
)

// Store is the PostgreSQL implementation of store.Store.
type Store struct {
	*sqlstore.Store
	db   *sql.DB
	r    *querier
	url  string
	held *sql.Conn // the session of Hold's lock, while it is held
}

var _ store.Store = (*Store)(nil)

// The bounds of a write: how many times a transaction PostgreSQL gave up
// on (a serialization failure, a deadlock) is tried, and how long one
// attempt may take once begun.
const (
	maxAttempts = 50
	writeWait   = 30 * time.Second
)

// maxConns bounds the store's connections to the server.
const maxConns = 16

// Open connects to the database at url (postgres://user@host:port/db?...)
// and brings its schema to SchemaVersion, in one transaction that holds
// a lock, so that gateways opening it at once migrate it once. A database
// with a newer schema, or with tables that are not a corral store's, is
// refused and left untouched.
func Open(ctx context.Context, url string) (*Store, error) {
	db, err := sql.Open("pgx", url)
	if err != nil {
		return nil, fmt.Errorf("store %s: %w", Redact(url), err)
	}
	db.SetMaxOpenConns(maxConns)
	db.SetMaxIdleConns(maxConns)
	if err := migrate(ctx, db); err != nil {
		db.Close()
		return nil, fmt.Errorf("store %s: %w", Redact(url), err)
	}
	s := &Store{db: db, r: &querier{x: db}, url: url}
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

// holdLock is the advisory lock key of the gateway that uses the store
// ("corral-g" in ASCII).
const holdLock = 0x636f7272616c2d67

// Hold makes this the only store open on its database that holds it,
// until Close: a second gateway is refused (errdefs.ErrFailedPrecondition)
// rather than let two gateways reconcile the same records, each settling
// the other's journal. The lock is PostgreSQL's, of this session: a
// gateway that dies, SIGKILL included, lets go of it with its connection.
func (s *Store) Hold(ctx context.Context) error {
	c, err := s.db.Conn(ctx)
	if err != nil {
		return err
	}
	var got bool
	if err := c.QueryRowContext(ctx, "SELECT pg_try_advisory_lock($1)", int64(holdLock)).Scan(&got); err != nil {
		c.Close()
		return err
	}
	if !got {
		c.Close()
		return errdefs.FailedPrecondition("another gateway uses the store %s: one gateway per store (stop it first)", Redact(s.url))
	}
	s.held = c
	return nil
}

// Close closes the store's connections, letting go of Hold's lock.
func (s *Store) Close() error {
	var err error
	if s.held != nil {
		err = s.held.Close()
		s.held = nil
	}
	return errors.Join(err, s.db.Close())
}

// backend is the Store's sqlstore.Backend.
type backend struct{ s *Store }

// Write runs fn in a SERIALIZABLE transaction, again (up to maxAttempts)
// when PostgreSQL gave up on it. ctx bounds only the wait before the
// first attempt: once begun, a write runs to its commit or its failure
// (within writeWait), so a nil error is a durable write and a caller that
// went away never leaves one half-known.
func (b backend) Write(ctx context.Context, fn func(q sqlstore.Querier) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), writeWait)
	defer cancel()
	var err error
	for attempt := 1; attempt <= maxAttempts; attempt++ {
		if err = b.attempt(wctx, fn); !retryable(err) {
			return err
		}
		time.Sleep(time.Duration(rand.Int64N(int64(attempt)*int64(2*time.Millisecond))) + time.Millisecond)
	}
	return fmt.Errorf("the store gave up on a write after %d attempts: %w", maxAttempts, err)
}

func (b backend) attempt(ctx context.Context, fn func(q sqlstore.Querier) error) error {
	tx, err := b.s.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelSerializable})
	if err != nil {
		return err
	}
	q := &querier{x: tx}
	if err := fn(q); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
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

// retryable reports whether PostgreSQL gave up on a transaction that may
// succeed if run again: a serialization failure, a deadlock, or a unique
// key that a concurrent transaction took between the store's check and
// its insert (the next attempt's check sees it).
func retryable(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	switch pgErr.Code {
	case "40001", "40P01", "23505":
		return true
	}
	return false
}

// execer is a *sql.DB or a *sql.Tx.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// querier runs the store's SQL, its ? and ?N placeholders rewritten as
// PostgreSQL's $N.
type querier struct{ x execer }

func (q *querier) Exec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return q.x.ExecContext(ctx, rebind(query), args...)
}

func (q *querier) Query(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return q.x.QueryContext(ctx, rebind(query), args...)
}

func (q *querier) QueryRow(ctx context.Context, query string, args ...any) sqlstore.Scanner {
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
