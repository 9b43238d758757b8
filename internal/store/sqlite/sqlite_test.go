package sqlite

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/store/sqlstore"
	"github.com/corral-sandbox/corral/internal/store/storetest"
)

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// openStore opens a store at path and closes it when the test ends.
func openStore(t *testing.T, path string) *Store {
	t.Helper()
	s, err := Open(testCtx(t), path)
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// newStore opens a fresh store in a temporary directory.
func newStore(t *testing.T) *Store {
	t.Helper()
	return openStore(t, filepath.Join(t.TempDir(), "corral.db"))
}

// rawDB opens path with the SQLite driver directly, bypassing the store.
func rawDB(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	return db
}

func rawExec(t *testing.T, path string, stmts ...string) {
	t.Helper()
	db := rawDB(t, path)
	defer db.Close()
	for _, q := range stmts {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// writeSQL runs one statement as a write transaction of the store (its
// read pool refuses writes).
func writeSQL(t *testing.T, s *Store, query string, args ...any) error {
	t.Helper()
	return s.w.write(testCtx(t), func(q sqlstore.Querier) error {
		_, err := q.Exec(bg, query, args...)
		return err
	})
}

func fileSum(t *testing.T, path string) [32]byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(data)
}

// assertNoSidecars fails when SQLite left a journal next to path.
func assertNoSidecars(t *testing.T, path string) {
	t.Helper()
	for _, suffix := range []string{"-wal", "-journal"} {
		if _, err := os.Stat(path + suffix); err == nil {
			t.Errorf("%s%s exists after a refused Open", filepath.Base(path), suffix)
		}
	}
}

func schemaVersion(t *testing.T, s *Store) int {
	t.Helper()
	var n, v int
	if err := s.db.QueryRow("SELECT count(*), max(version) FROM schema_version").Scan(&n, &v); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("schema_version has %d rows, want 1", n)
	}
	return v
}

func TestOpenCreatesFreshStore(t *testing.T) {
	path := filepath.Join(t.TempDir(), "corral.db")
	s := openStore(t, path)
	if v := schemaVersion(t, s); v != SchemaVersion {
		t.Errorf("fresh store has schema version %d, want %d", v, SchemaVersion)
	}
	var mode string
	if err := s.db.QueryRow("PRAGMA journal_mode").Scan(&mode); err != nil {
		t.Fatal(err)
	}
	if mode != "wal" {
		t.Errorf("journal_mode = %q, want wal", mode)
	}
	list, err := s.ListSandboxes(testCtx(t), "")
	if err != nil || len(list) != 0 {
		t.Errorf("ListSandboxes on a fresh store = %v, %v; want none", list, err)
	}
	if matches, _ := filepath.Glob(path + ".*.bak"); len(matches) != 0 {
		t.Errorf("a fresh store was backed up: %v", matches)
	}
}

func TestReopenKeepsRecords(t *testing.T) {
	path := filepath.Join(t.TempDir(), "corral.db")
	s, err := Open(testCtx(t), path)
	if err != nil {
		t.Fatal(err)
	}
	sb := storetest.NewSandbox("web", storetest.T0)
	sb.RequestID = "req-1"
	req := storetest.Create(t, s, sb)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = openStore(t, path)
	if v := schemaVersion(t, s); v != SchemaVersion {
		t.Errorf("reopened store has schema version %d, want %d", v, SchemaVersion)
	}
	got := storetest.Get(t, s, sb.ID)
	if got.Name != "web" || got.RequestID != "req-1" || got.Desired != sandbox.DesiredRunning ||
		got.Phase != sandbox.PhaseProvisioning || got.Generation != 1 || got.Revision != 1 {
		t.Errorf("reopened record = %+v", got)
	}
	if !got.CreatedAt.Equal(storetest.T0) || !got.UpdatedAt.Equal(storetest.T0) || !got.Deadline.Equal(storetest.T0.Add(time.Minute)) {
		t.Errorf("reopened times = %v %v %v", got.CreatedAt, got.UpdatedAt, got.Deadline)
	}
	if got.Spec.Image != "alpine:3" || !slices.Equal(got.Spec.Command, []string{"sleep", "infinity"}) ||
		got.Spec.Labels["team"] != "infra" || got.Spec.Policy != "default" {
		t.Errorf("reopened spec = %+v", got.Spec)
	}
	if got.LastRequest == nil || got.LastRequest.ID != req.ID || got.LastRequest.Kind != sandbox.OpCreate {
		t.Errorf("reopened LastRequest = %+v, want the create request %d", got.LastRequest, req.ID)
	}
	byName, err := s.GetSandboxByName(testCtx(t), "", "web")
	if err != nil || byName.ID != sb.ID {
		t.Errorf("GetSandboxByName(web) = %v, %v", byName, err)
	}
	if matches, _ := filepath.Glob(path + ".*.bak"); len(matches) != 0 {
		t.Errorf("reopening at the current version made a backup: %v", matches)
	}
}

func TestOpenRefusesNewerSchema(t *testing.T) {
	// A newer corral may have left the file in WAL mode (as this one does)
	// or not; in rollback-journal mode, switching to WAL before refusing
	// would show in the file header.
	for name, journalMode := range map[string]string{"wal": "WAL", "rollback journal": "DELETE"} {
		t.Run(name, func(t *testing.T) { testOpenRefusesNewerSchema(t, journalMode) })
	}
}

func testOpenRefusesNewerSchema(t *testing.T, journalMode string) {
	path := filepath.Join(t.TempDir(), "corral.db")
	s, err := Open(testCtx(t), path)
	if err != nil {
		t.Fatal(err)
	}
	storetest.Create(t, s, storetest.NewSandbox("web", storetest.T0))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	rawExec(t, path, "UPDATE schema_version SET version = version + 1", "PRAGMA journal_mode="+journalMode)
	before := fileSum(t, path)

	s, err = Open(testCtx(t), path)
	if err == nil {
		s.Close()
		t.Fatal("Open of a store with a newer schema succeeded")
	}
	if !strings.Contains(err.Error(), "newer") {
		t.Errorf("error %q does not mention a newer schema", err)
	}
	if !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("error %q is not ErrFailedPrecondition", err)
	}
	if after := fileSum(t, path); after != before {
		t.Error("refused Open changed the database file")
	}
	assertNoSidecars(t, path)
}

func TestOpenRefusesGarbage(t *testing.T) {
	for name, content := range map[string][]byte{
		"short": []byte("hello\n"),
		"long":  bytes.Repeat([]byte("this is not a database\n"), 500),
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "corral.db")
			if err := os.WriteFile(path, content, 0o600); err != nil {
				t.Fatal(err)
			}
			s, err := Open(testCtx(t), path)
			if err == nil {
				s.Close()
				t.Fatal("Open of a garbage file succeeded")
			}
			if !strings.Contains(err.Error(), "not a SQLite database") {
				t.Errorf("error %q does not say the file is not a SQLite database", err)
			}
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(data, content) {
				t.Error("refused Open changed the garbage file")
			}
			assertNoSidecars(t, path)
		})
	}
}

func TestOpenRefusesDirectory(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(testCtx(t), dir)
	if err == nil {
		s.Close()
		t.Fatal("Open of a directory succeeded")
	}
	if !strings.Contains(err.Error(), "directory") {
		t.Errorf("error %q does not say it is a directory", err)
	}
}

func TestOpenRefusesForeignDatabase(t *testing.T) {
	path := filepath.Join(t.TempDir(), "other.db")
	rawExec(t, path, "CREATE TABLE photos (id INTEGER PRIMARY KEY, name TEXT)", "INSERT INTO photos (name) VALUES ('cat')")
	before := fileSum(t, path)

	s, err := Open(testCtx(t), path)
	if err == nil {
		s.Close()
		t.Fatal("Open of a foreign database succeeded")
	}
	if !strings.Contains(err.Error(), "schema_version") {
		t.Errorf("error %q does not explain the missing schema_version", err)
	}
	if after := fileSum(t, path); after != before {
		t.Error("refused Open changed the foreign database")
	}
	db := rawDB(t, path)
	defer db.Close()
	var n int
	if err := db.QueryRow("SELECT count(*) FROM sqlite_master WHERE name IN ('sandboxes','operations','schema_version')").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("refused Open created %d corral tables in the foreign database", n)
	}
}

// withExtraMigration pretends this build has one more migration than it
// has, so that the current schema is an older one to migrate from.
func withExtraMigration(t *testing.T, stmt string) {
	t.Helper()
	oldMigrations, oldVersion := migrations, SchemaVersion
	t.Cleanup(func() { migrations, SchemaVersion = oldMigrations, oldVersion })
	migrations = append(slices.Clip(slices.Clone(migrations)), stmt)
	SchemaVersion = len(migrations)
}

func TestOpenBacksUpBeforeMigrating(t *testing.T) {
	path := filepath.Join(t.TempDir(), "corral.db")
	s, err := Open(testCtx(t), path)
	if err != nil {
		t.Fatal(err)
	}
	from := SchemaVersion
	sb := storetest.NewSandbox("web", storetest.T0)
	storetest.Create(t, s, sb)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	withExtraMigration(t, "CREATE TABLE extra (x INTEGER)")
	s = openStore(t, path)
	if v := schemaVersion(t, s); v != from+1 {
		t.Errorf("migrated store has schema version %d, want %d", v, from+1)
	}
	if err := writeSQL(t, s, "INSERT INTO extra (x) VALUES (1)"); err != nil {
		t.Errorf("the new migration did not run: %v", err)
	}
	storetest.Get(t, s, sb.ID)

	backups, err := filepath.Glob(path + ".v*.bak")
	if err != nil {
		t.Fatal(err)
	}
	if len(backups) != 1 {
		t.Fatalf("backups = %v, want one", backups)
	}
	if want := fmt.Sprintf("%s.v%d-", filepath.Base(path), from); !strings.HasPrefix(filepath.Base(backups[0]), want) {
		t.Errorf("backup %s is not named after version %d", backups[0], from)
	}
	db := rawDB(t, backups[0])
	defer db.Close()
	var v, extra, records int
	if err := db.QueryRow("SELECT version FROM schema_version").Scan(&v); err != nil {
		t.Fatal(err)
	}
	if v != from {
		t.Errorf("backup has schema version %d, want the pre-migration %d", v, from)
	}
	if err := db.QueryRow("SELECT count(*) FROM sqlite_master WHERE name = 'extra'").Scan(&extra); err != nil {
		t.Fatal(err)
	}
	if extra != 0 {
		t.Error("backup was taken after the migration")
	}
	if err := db.QueryRow("SELECT count(*) FROM sandboxes WHERE id = ?", sb.ID).Scan(&records); err != nil {
		t.Fatal(err)
	}
	if records != 1 {
		t.Errorf("backup holds %d copies of the record, want 1", records)
	}
}

func TestOpenFailedMigrationRollsBack(t *testing.T) {
	path := filepath.Join(t.TempDir(), "corral.db")
	s, err := Open(testCtx(t), path)
	if err != nil {
		t.Fatal(err)
	}
	from := SchemaVersion
	sb := storetest.NewSandbox("web", storetest.T0)
	storetest.Create(t, s, sb)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	oldMigrations, oldVersion := migrations, SchemaVersion
	withExtraMigration(t, "CREATE TABLE extra (x INTEGER); CREATE TABLE sandboxes (x INTEGER)")
	s, err = Open(testCtx(t), path)
	if err == nil {
		s.Close()
		t.Fatal("Open with a failing migration succeeded")
	}
	if !strings.Contains(err.Error(), "migrate to version") {
		t.Errorf("error %q does not name the failed migration", err)
	}

	migrations, SchemaVersion = oldMigrations, oldVersion
	s = openStore(t, path)
	if v := schemaVersion(t, s); v != from {
		t.Errorf("after a failed migration the schema version is %d, want %d", v, from)
	}
	var extra int
	if err := s.db.QueryRow("SELECT count(*) FROM sqlite_master WHERE name = 'extra'").Scan(&extra); err != nil {
		t.Fatal(err)
	}
	if extra != 0 {
		t.Error("a failed migration left part of its changes behind")
	}
	storetest.Get(t, s, sb.ID)
}

func TestPutOperationNeedsDeadline(t *testing.T) {
	s := newStore(t)
	sb := storetest.NewSandbox("web", storetest.T0)
	storetest.Create(t, s, sb)

	op := storetest.NewOp(sb.ID, sandbox.OpStart, "me", storetest.T0)
	op.Deadline = time.Time{}
	if err := s.PutOperation(testCtx(t), op); err == nil {
		t.Error("PutOperation without a deadline succeeded")
	} else if !strings.Contains(err.Error(), "deadline") || !strings.Contains(err.Error(), sb.ID) {
		t.Errorf("PutOperation without a deadline: %q does not name the sandbox and the missing deadline", err)
	}
	if n := len(storetest.Ops(t, s, sb.ID)); n != 1 {
		t.Errorf("journal has %d entries, want only the create request", n)
	}

	err := writeSQL(t, s, `INSERT INTO operations (sandbox_id, kind, state, owner, attempt, generation, started_at, deadline)
		VALUES (?, 'start', 'pending', 'me', 1, 1, 1, 0)`, sb.ID)
	if err == nil || !strings.Contains(err.Error(), "CHECK") {
		t.Errorf("insert with deadline 0 = %v, want a CHECK constraint failure", err)
	}
	if n := len(storetest.Ops(t, s, sb.ID)); n != 1 {
		t.Errorf("journal has %d entries, want only the create request", n)
	}
}

func TestIntegrityCheck(t *testing.T) {
	s := newStore(t)
	storetest.Create(t, s, storetest.NewSandbox("web", storetest.T0))
	if err := s.IntegrityCheck(testCtx(t)); err != nil {
		t.Errorf("IntegrityCheck on a fresh store: %v", err)
	}
}
