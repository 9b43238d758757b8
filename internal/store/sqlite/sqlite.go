// Package sqlite is the embedded SQLite store: one file, WAL mode with
// synchronous=FULL, one connection (so one writer), versioned migrations.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/store"
	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// Store is the SQLite implementation of store.Store.
type Store struct {
	db   *sql.DB
	path string
}

var _ store.Store = (*Store)(nil)

// Open opens (creating when missing) the store at path and brings its schema
// to SchemaVersion, backing the file up first when it migrates an existing
// store. A store with a newer schema, or a file that is not a SQLite
// database, is refused and left untouched.
func Open(ctx context.Context, path string) (*Store, error) {
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return nil, fmt.Errorf("store %s: is a directory, not a database file", path)
	}
	dsn := "file:" + path + "?_pragma=busy_timeout(10000)&_pragma=foreign_keys(1)"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("store %s: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	s := &Store{db: db, path: path}
	if err := s.init(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("store %s: %w", path, err)
	}
	return s, nil
}

func (s *Store) init(ctx context.Context) error {
	version, err := s.version(ctx)
	if err != nil {
		return err
	}
	if version > SchemaVersion {
		return errdefs.FailedPrecondition("schema version %d is newer than this corral supports (%d); run a newer corral", version, SchemaVersion)
	}
	for _, pragma := range []string{"PRAGMA journal_mode=WAL", "PRAGMA synchronous=FULL"} {
		if _, err := s.db.ExecContext(ctx, pragma); err != nil {
			return fmt.Errorf("%s: %w", pragma, err)
		}
	}
	if version == SchemaVersion {
		return nil
	}
	if version > 0 {
		backup := fmt.Sprintf("%s.v%d-%s.bak", s.path, version, time.Now().UTC().Format("20060102T150405"))
		if _, err := s.db.ExecContext(ctx, "VACUUM INTO ?", backup); err != nil {
			return fmt.Errorf("back up before migrating: %w", err)
		}
	}
	return s.migrate(ctx, version)
}

// version reads the schema version; 0 is an empty database.
func (s *Store) version(ctx context.Context) (int, error) {
	var tables int
	err := s.db.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_master WHERE type='table' AND name='schema_version'").Scan(&tables)
	if err != nil {
		return 0, describe(err)
	}
	if tables == 0 {
		var any int
		if err := s.db.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_master").Scan(&any); err != nil {
			return 0, describe(err)
		}
		if any > 0 {
			return 0, errdefs.FailedPrecondition("not a corral store: it has tables but no schema_version")
		}
		return 0, nil
	}
	var v int
	if err := s.db.QueryRowContext(ctx, "SELECT version FROM schema_version").Scan(&v); err != nil {
		return 0, fmt.Errorf("read schema_version: %w", describe(err))
	}
	return v, nil
}

func (s *Store) migrate(ctx context.Context, from int) error {
	return s.tx(ctx, func(tx *sql.Tx) error {
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
		_, err := tx.ExecContext(ctx, "UPDATE schema_version SET version = ?", SchemaVersion)
		return err
	})
}

// describe turns SQLite's terse errors about foreign files into clear ones.
func describe(err error) error {
	msg := err.Error()
	if strings.Contains(msg, "not a database") || strings.Contains(msg, "malformed") {
		return fmt.Errorf("not a SQLite database or corrupt (%v); move it aside to start afresh", err)
	}
	return err
}

func (s *Store) tx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
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

// Close checkpoints the WAL and closes the database.
func (s *Store) Close() error {
	_, _ = s.db.Exec("PRAGMA wal_checkpoint(TRUNCATE)")
	return s.db.Close()
}
