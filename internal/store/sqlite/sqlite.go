// Package sqlite is the embedded SQLite store: one file, WAL mode with
// synchronous=FULL, versioned migrations. One writer goroutine owns the
// only writing connection and commits the write transactions that queue
// while it is busy together, one fsync for all (see writer.go); reads go to
// a pool of read-only connections beside it, which WAL allows.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/store"
	"github.com/corral-sandbox/corral/internal/store/sqlstore"
	msqlite "modernc.org/sqlite" // registers the "sqlite" driver
)

// Store is the SQLite implementation of store.Store: sqlstore's, on this
// package's writer and read pool.
type Store struct {
	*sqlstore.Store
	path string
	wdb  *sql.DB // the writing connection, owned by w once open
	w    *writer
	db   *sql.DB // the read-only pool
	r    *stmts  // its prepared statements

	closeOnce sync.Once
	closeErr  error
}

// readers is the size of the read-only pool.
const readers = 4

var _ store.Store = (*Store)(nil)

// Open opens (creating when missing) the store at path and brings its schema
// to SchemaVersion, backing the file up first when it migrates an existing
// store. A store with a newer schema, or a file that is not a SQLite
// database, is refused and left untouched.
func Open(ctx context.Context, path string) (*Store, error) {
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return nil, fmt.Errorf("store %s: is a directory, not a database file", path)
	}
	// Commits sync with fdatasync, as SQLite's own Linux builds do: it
	// syncs the data and the size that reading it back needs, everything
	// but the timestamps, so a commit is as durable and waits less. (The
	// transpiled library keeps SQLite's source default, fsync, unless asked;
	// where fdatasync is missing it stays on fsync.)
	_, _ = msqlite.Fdatasync(true)
	dsn := "file:" + path + "?_pragma=busy_timeout(10000)&_pragma=foreign_keys(1)"
	wdb, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("store %s: %w", path, err)
	}
	wdb.SetMaxOpenConns(1)
	s := &Store{wdb: wdb, path: path}
	if err := s.init(ctx); err != nil {
		wdb.Close()
		return nil, fmt.Errorf("store %s: %w", path, err)
	}
	conn, err := wdb.Conn(ctx)
	if err != nil {
		wdb.Close()
		return nil, fmt.Errorf("store %s: %w", path, err)
	}
	// Read-only connections: a statement that would write fails on them.
	rdb, err := sql.Open("sqlite", "file:"+path+"?mode=ro&_pragma=busy_timeout(10000)")
	if err != nil {
		conn.Close()
		wdb.Close()
		return nil, fmt.Errorf("store %s: %w", path, err)
	}
	rdb.SetMaxOpenConns(readers)
	rdb.SetMaxIdleConns(readers)
	s.db, s.r, s.w = rdb, newStmts(rdb), newWriter(conn, newReserve(path))
	s.Store = sqlstore.New(backend{s})
	return s, nil
}

// backend is the Store's sqlstore.Backend: one writer, which serializes
// every write, and the read pool.
type backend struct{ s *Store }

func (b backend) Write(ctx context.Context, fn func(q sqlstore.Querier) error) error {
	return b.s.w.write(ctx, fn)
}

func (b backend) Grow(ctx context.Context, fn func(q sqlstore.Querier) error) error {
	return b.s.w.grow(ctx, fn)
}

func (b backend) Reads() sqlstore.Querier { return b.s.r }

func (backend) PoolLabel() string {
	return `json_extract(spec, '$.labels."` + sandbox.LabelPool + `"')`
}

// ByIndex names the index: left to itself, SQLite picks the partial index
// of pending entries for a sandbox's pending requests and visits every
// pending entry of the store.
func (backend) ByIndex(name string) string { return "INDEXED BY " + name }

func (s *Store) init(ctx context.Context) error {
	version, err := s.version(ctx)
	if err != nil {
		return err
	}
	if version > SchemaVersion {
		return errdefs.FailedPrecondition("schema version %d is newer than this corral supports (%d); run a newer corral", version, SchemaVersion)
	}
	for _, pragma := range []string{"PRAGMA journal_mode=WAL", "PRAGMA synchronous=FULL"} {
		if _, err := s.wdb.ExecContext(ctx, pragma); err != nil {
			return fmt.Errorf("%s: %w", pragma, err)
		}
	}
	if version == SchemaVersion {
		return nil
	}
	if version > 0 {
		backup := fmt.Sprintf("%s.v%d-%s.bak", s.path, version, time.Now().UTC().Format("20060102T150405"))
		if _, err := s.wdb.ExecContext(ctx, "VACUUM INTO ?", backup); err != nil {
			return fmt.Errorf("back up before migrating: %w", err)
		}
	}
	return s.migrate(ctx, version)
}

// version reads the schema version; 0 is an empty database.
func (s *Store) version(ctx context.Context) (int, error) {
	var tables int
	err := s.wdb.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_master WHERE type='table' AND name='schema_version'").Scan(&tables)
	if err != nil {
		return 0, describe(err)
	}
	if tables == 0 {
		var any int
		if err := s.wdb.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_master").Scan(&any); err != nil {
			return 0, describe(err)
		}
		if any > 0 {
			return 0, errdefs.FailedPrecondition("not a corral store: it has tables but no schema_version")
		}
		return 0, nil
	}
	var v int
	if err := s.wdb.QueryRowContext(ctx, "SELECT version FROM schema_version").Scan(&v); err != nil {
		return 0, fmt.Errorf("read schema_version: %w", describe(err))
	}
	return v, nil
}

// migrate runs before the writer starts, on its connection (the only
// one: the pragmas apply to it). Foreign keys are off while it runs, so
// that a table rebuilt under a new key does not cascade into the tables
// that refer to it; what it leaves is checked before it commits.
func (s *Store) migrate(ctx context.Context, from int) error {
	if _, err := s.wdb.ExecContext(ctx, "PRAGMA foreign_keys=OFF"); err != nil {
		return err
	}
	if err := s.migrateTx(ctx, from); err != nil {
		return err
	}
	_, err := s.wdb.ExecContext(ctx, "PRAGMA foreign_keys=ON")
	return err
}

func (s *Store) migrateTx(ctx context.Context, from int) error {
	tx, err := s.wdb.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	err = func() error {
		if from == 0 {
			if _, err := tx.ExecContext(ctx, "CREATE TABLE schema_version (version INTEGER NOT NULL)"); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, "INSERT INTO schema_version (version) VALUES (0)"); err != nil {
				return err
			}
		}
		for v := from; v < SchemaVersion; v++ {
			if _, err := tx.ExecContext(ctx, migrations[v]); err != nil {
				return fmt.Errorf("migrate to version %d: %w", v+1, err)
			}
		}
		if err := foreignKeysHold(ctx, tx); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, "UPDATE schema_version SET version = ?", SchemaVersion)
		return err
	}()
	if err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// foreignKeysHold fails when a row refers to a row that is not there.
func foreignKeysHold(ctx context.Context, tx *sql.Tx) error {
	rows, err := tx.QueryContext(ctx, "PRAGMA foreign_key_check")
	if err != nil {
		return err
	}
	defer rows.Close()
	if rows.Next() {
		var table string
		var rowid sql.NullInt64
		var parent string
		var fk int
		if err := rows.Scan(&table, &rowid, &parent, &fk); err != nil {
			return err
		}
		return fmt.Errorf("migration left a row of %s (rowid %d) that refers to no row of %s", table, rowid.Int64, parent)
	}
	return rows.Err()
}

// describe turns SQLite's terse errors about foreign files into clear ones.
func describe(err error) error {
	msg := err.Error()
	if strings.Contains(msg, "not a database") || strings.Contains(msg, "malformed") {
		return fmt.Errorf("not a SQLite database or corrupt (%v); move it aside to start afresh", err)
	}
	return err
}

// IntegrityCheck runs SQLite's integrity_check and returns its findings.
func (s *Store) IntegrityCheck(ctx context.Context) error {
	var res string
	if err := s.db.QueryRowContext(ctx, "PRAGMA integrity_check").Scan(&res); err != nil {
		return err
	}
	if res != "ok" {
		return errors.New(res)
	}
	return nil
}

// Close lets the queued writes commit, checkpoints the WAL and closes the
// database. Writes asked after it fail.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.w.Close()
		s.r.close()
		rerr := s.db.Close()
		s.w.q.close()
		_, _ = s.w.conn.ExecContext(bg, "PRAGMA wal_checkpoint(TRUNCATE)")
		s.w.conn.Close()
		s.closeErr = errors.Join(rerr, s.wdb.Close())
	})
	return s.closeErr
}
