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
	"github.com/corral-sandbox/corral/internal/store"
)

// t0 is the base of every timestamp the tests write; nanoseconds are kept to
// prove they survive the round trip.
var t0 = time.Date(2030, 1, 2, 3, 4, 5, 6, time.UTC)

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
	return s.w.write(testCtx(t), func(q *stmts) error {
		_, err := q.exec(bg, query, args...)
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

func newSandbox(name string, at time.Time) *sandbox.Sandbox {
	return &sandbox.Sandbox{
		ID:     sandbox.NewID(),
		Name:   name,
		Tenant: "default",
		Spec: sandbox.Spec{
			Image:   "alpine:3",
			Command: []string{"sleep", "infinity"},
			Labels:  map[string]string{"team": "infra"},
			Policy:  "default",
		},
		Desired:    sandbox.DesiredRunning,
		Phase:      sandbox.PhaseProvisioning,
		Generation: 1,
		CreatedAt:  at,
		UpdatedAt:  at,
		Deadline:   at.Add(time.Minute),
	}
}

func newOp(sandboxID string, kind sandbox.OpKind, owner string, at time.Time) *sandbox.Operation {
	return &sandbox.Operation{
		SandboxID:  sandboxID,
		Kind:       kind,
		State:      sandbox.OpPending,
		Owner:      owner,
		Attempt:    1,
		Generation: 1,
		StartedAt:  at,
		Deadline:   at.Add(time.Minute),
	}
}

// create stores sb with a pending create request and returns the request.
func create(t *testing.T, s *Store, sb *sandbox.Sandbox) *sandbox.Operation {
	t.Helper()
	req := newOp(sb.ID, sandbox.OpCreate, "me", sb.CreatedAt)
	got, created, err := s.CreateSandbox(testCtx(t), sb, req)
	if err != nil {
		t.Fatalf("CreateSandbox(%s): %v", sb.Name, err)
	}
	if !created || got.ID != sb.ID {
		t.Fatalf("CreateSandbox(%s) = %s, created=%v; want a new record %s", sb.Name, got.ID, created, sb.ID)
	}
	return req
}

func put(t *testing.T, s *Store, op *sandbox.Operation) *sandbox.Operation {
	t.Helper()
	if err := s.PutOperation(testCtx(t), op); err != nil {
		t.Fatalf("PutOperation(%s): %v", op.Kind, err)
	}
	if op.ID == 0 {
		t.Fatalf("PutOperation(%s) left ID 0", op.Kind)
	}
	return op
}

func ops(t *testing.T, s *Store, id string) []*sandbox.Operation {
	t.Helper()
	list, err := s.ListOperations(testCtx(t), id)
	if err != nil {
		t.Fatal(err)
	}
	return list
}

func opByID(t *testing.T, s *Store, sandboxID string, id int64) *sandbox.Operation {
	t.Helper()
	for _, o := range ops(t, s, sandboxID) {
		if o.ID == id {
			return o
		}
	}
	t.Fatalf("operation %d of sandbox %s not found", id, sandboxID)
	return nil
}

func get(t *testing.T, s *Store, id string) *sandbox.Sandbox {
	t.Helper()
	sb, err := s.GetSandbox(testCtx(t), id)
	if err != nil {
		t.Fatalf("GetSandbox(%s): %v", id, err)
	}
	return sb
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
	sb := newSandbox("web", t0)
	sb.RequestID = "req-1"
	req := create(t, s, sb)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = openStore(t, path)
	if v := schemaVersion(t, s); v != SchemaVersion {
		t.Errorf("reopened store has schema version %d, want %d", v, SchemaVersion)
	}
	got := get(t, s, sb.ID)
	if got.Name != "web" || got.RequestID != "req-1" || got.Desired != sandbox.DesiredRunning ||
		got.Phase != sandbox.PhaseProvisioning || got.Generation != 1 || got.Revision != 1 {
		t.Errorf("reopened record = %+v", got)
	}
	if !got.CreatedAt.Equal(t0) || !got.UpdatedAt.Equal(t0) || !got.Deadline.Equal(t0.Add(time.Minute)) {
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
	create(t, s, newSandbox("web", t0))
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
	sb := newSandbox("web", t0)
	create(t, s, sb)
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
	get(t, s, sb.ID)

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
	sb := newSandbox("web", t0)
	create(t, s, sb)
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
	get(t, s, sb.ID)
}

func TestCreateSandboxNameTaken(t *testing.T) {
	s := newStore(t)
	first := newSandbox("web", t0)
	create(t, s, first)

	second := newSandbox("web", t0.Add(time.Second))
	second.RequestID = "other-request"
	got, created, err := s.CreateSandbox(testCtx(t), second, newOp(second.ID, sandbox.OpCreate, "me", t0))
	if !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Fatalf("second create of the name = %v, %v, %v; want ErrAlreadyExists", got, created, err)
	}
	if !strings.Contains(err.Error(), `"web"`) {
		t.Errorf("error %q does not name the sandbox", err)
	}
	list, err := s.ListSandboxes(testCtx(t), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].ID != first.ID {
		t.Errorf("after a refused create the records are %v", list)
	}
	if o := ops(t, s, second.ID); len(o) != 0 {
		t.Errorf("a refused create wrote %d journal entries", len(o))
	}
}

func TestCreateSandboxRequestIDReplay(t *testing.T) {
	s := newStore(t)
	first := newSandbox("web", t0)
	first.RequestID = "req-1"
	firstReq := create(t, s, first)

	retry := newSandbox("web", t0.Add(time.Second))
	retry.RequestID = "req-1"
	retryReq := newOp(retry.ID, sandbox.OpCreate, "me", retry.CreatedAt)
	got, created, err := s.CreateSandbox(testCtx(t), retry, retryReq)
	if err != nil {
		t.Fatalf("replayed create: %v", err)
	}
	if created {
		t.Error("replayed create reports created=true")
	}
	if got.ID != first.ID || !got.CreatedAt.Equal(t0) {
		t.Errorf("replayed create returned %s created %v, want the first record %s", got.ID, got.CreatedAt, first.ID)
	}
	if got.LastRequest == nil || got.LastRequest.ID != firstReq.ID {
		t.Errorf("replayed create LastRequest = %+v, want the first request %d", got.LastRequest, firstReq.ID)
	}
	if retryReq.ID != 0 {
		t.Errorf("replayed create inserted its request (id %d)", retryReq.ID)
	}
	list, err := s.ListSandboxes(testCtx(t), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 {
		t.Errorf("after a replayed create there are %d records, want 1", len(list))
	}
	if o := ops(t, s, first.ID); len(o) != 1 {
		t.Errorf("after a replayed create the journal has %d entries, want 1", len(o))
	}
	if o := ops(t, s, retry.ID); len(o) != 0 {
		t.Errorf("replayed create journaled %d entries under the new id", len(o))
	}
}

func TestCreateSandboxRequestIDOtherName(t *testing.T) {
	s := newStore(t)
	first := newSandbox("web", t0)
	first.RequestID = "req-1"
	create(t, s, first)

	other := newSandbox("db", t0)
	other.RequestID = "req-1"
	_, _, err := s.CreateSandbox(testCtx(t), other, newOp(other.ID, sandbox.OpCreate, "me", t0))
	if !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("reusing a request id for another name = %v, want ErrFailedPrecondition", err)
	}
	if _, err := s.GetSandboxByName(testCtx(t), "", "db"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("GetSandboxByName(db) after a refused create = %v, want ErrNotFound", err)
	}
	if o := ops(t, s, other.ID); len(o) != 0 {
		t.Errorf("a refused create wrote %d journal entries", len(o))
	}
}

func TestMutateSupersedesPendingRequest(t *testing.T) {
	s := newStore(t)
	sb := newSandbox("web", t0)
	createReq := create(t, s, sb)
	driverOp := put(t, s, newOp(sb.ID, sandbox.OpDriverCreate, "me", t0))

	at := t0.Add(10 * time.Second)
	stop := newOp(sb.ID, sandbox.OpStop, "me", at)
	got, err := s.Mutate(testCtx(t), sb.ID, func(sb *sandbox.Sandbox) (store.Mutation, error) {
		sb.Desired = sandbox.DesiredStopped
		sb.UpdatedAt = at
		sb.Deadline = at.Add(time.Minute)
		return store.Mutation{Request: stop}, nil
	})
	if err != nil {
		t.Fatalf("Mutate: %v", err)
	}
	if got.Revision != 2 || got.Desired != sandbox.DesiredStopped {
		t.Errorf("Mutate returned revision %d desired %s", got.Revision, got.Desired)
	}
	if got.LastRequest == nil || got.LastRequest.ID != stop.ID || stop.ID == 0 {
		t.Errorf("Mutate LastRequest = %+v, want the stop request", got.LastRequest)
	}
	stored := get(t, s, sb.ID)
	if stored.Revision != 2 || stored.Desired != sandbox.DesiredStopped || !stored.UpdatedAt.Equal(at) {
		t.Errorf("stored record = %+v", stored)
	}

	old := opByID(t, s, sb.ID, createReq.ID)
	if old.State != sandbox.OpSuperseded {
		t.Errorf("old create request is %s, want superseded", old.State)
	}
	if !old.FinishedAt.Equal(at) {
		t.Errorf("old create request finished at %v, want %v", old.FinishedAt, at)
	}
	if !strings.Contains(old.Detail, "stop") {
		t.Errorf("old create request detail %q does not name what superseded it", old.Detail)
	}
	if o := opByID(t, s, sb.ID, stop.ID); o.State != sandbox.OpPending || o.Kind != sandbox.OpStop {
		t.Errorf("new request is %s %s, want a pending stop", o.Kind, o.State)
	}
	if o := opByID(t, s, sb.ID, driverOp.ID); o.State != sandbox.OpPending {
		t.Errorf("driver entry is %s, want it left pending", o.State)
	}
	if n := len(ops(t, s, sb.ID)); n != 3 {
		t.Errorf("journal has %d entries, want 3", n)
	}
}

func TestMutateCallbackErrorRollsBack(t *testing.T) {
	s := newStore(t)
	sb := newSandbox("web", t0)
	createReq := create(t, s, sb)

	boom := errors.New("boom")
	_, err := s.Mutate(testCtx(t), sb.ID, func(sb *sandbox.Sandbox) (store.Mutation, error) {
		sb.Desired = sandbox.DesiredDeleted
		sb.Phase = sandbox.PhaseDeleting
		return store.Mutation{Request: newOp(sb.ID, sandbox.OpDelete, "me", t0)}, boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Mutate = %v, want the callback's error", err)
	}
	stored := get(t, s, sb.ID)
	if stored.Revision != 1 || stored.Desired != sandbox.DesiredRunning || stored.Phase != sandbox.PhaseProvisioning {
		t.Errorf("after a failed Mutate the record is %+v", stored)
	}
	journal := ops(t, s, sb.ID)
	if len(journal) != 1 || journal[0].ID != createReq.ID || journal[0].State != sandbox.OpPending {
		t.Errorf("after a failed Mutate the journal is %+v", journal)
	}
}

// A new policy (UpdateSandbox) is the one part of a spec that changes.
func TestMutateStoresTheSpec(t *testing.T) {
	s := newStore(t)
	sb := newSandbox("web", t0)
	create(t, s, sb)
	if _, err := s.Mutate(testCtx(t), sb.ID, func(sb *sandbox.Sandbox) (store.Mutation, error) {
		sb.Spec.Policy = "version: 1\n"
		return store.Mutation{}, nil
	}); err != nil {
		t.Fatal(err)
	}
	if got := get(t, s, sb.ID).Spec.Policy; got != "version: 1\n" {
		t.Errorf("policy after Mutate = %q", got)
	}
}

// A write that fails after the record was updated and the old request
// superseded must take both back.
func TestMutateFailedJournalWriteRollsBack(t *testing.T) {
	s := newStore(t)
	sb := newSandbox("web", t0)
	createReq := create(t, s, sb)

	bad := newOp(sb.ID, sandbox.OpStop, "me", t0)
	bad.Deadline = time.Time{}
	_, err := s.Mutate(testCtx(t), sb.ID, func(sb *sandbox.Sandbox) (store.Mutation, error) {
		sb.Desired = sandbox.DesiredStopped
		sb.UpdatedAt = t0.Add(time.Second)
		return store.Mutation{Request: bad}, nil
	})
	if err == nil {
		t.Fatal("Mutate with a request without deadline succeeded")
	}
	stored := get(t, s, sb.ID)
	if stored.Revision != 1 || stored.Desired != sandbox.DesiredRunning || !stored.UpdatedAt.Equal(t0) {
		t.Errorf("after a failed Mutate the record is %+v", stored)
	}
	journal := ops(t, s, sb.ID)
	if len(journal) != 1 || journal[0].ID != createReq.ID {
		t.Fatalf("after a failed Mutate the journal is %+v", journal)
	}
	if journal[0].State != sandbox.OpPending || !journal[0].FinishedAt.IsZero() || journal[0].Detail != "" {
		t.Errorf("after a failed Mutate the create request is %+v, want it still pending", journal[0])
	}
}

func TestMutateExitCodeAndRestarts(t *testing.T) {
	s := newStore(t)
	sb := newSandbox("web", t0)
	create(t, s, sb)
	if got := get(t, s, sb.ID); got.ExitCode != nil || got.Restarts != 0 {
		t.Fatalf("new record has exit code %v and %d restarts, want none", got.ExitCode, got.Restarts)
	}
	for _, code := range []int{0, 137} {
		_, err := s.Mutate(testCtx(t), sb.ID, func(sb *sandbox.Sandbox) (store.Mutation, error) {
			sb.Phase = sandbox.PhaseExited
			sb.ExitCode = &code
			sb.Restarts++
			return store.Mutation{}, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		got := get(t, s, sb.ID)
		if got.ExitCode == nil || *got.ExitCode != code || got.Phase != sandbox.PhaseExited {
			t.Errorf("after exit %d the record has exit code %v, phase %s", code, got.ExitCode, got.Phase)
		}
	}
	_, err := s.Mutate(testCtx(t), sb.ID, func(sb *sandbox.Sandbox) (store.Mutation, error) {
		sb.Phase, sb.ExitCode = sandbox.PhaseReady, nil
		return store.Mutation{}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := get(t, s, sb.ID); got.ExitCode != nil || got.Restarts != 2 {
		t.Errorf("after a restart the record has exit code %v and %d restarts, want none and 2", got.ExitCode, got.Restarts)
	}
}

func TestMutateMissing(t *testing.T) {
	s := newStore(t)
	called := false
	_, err := s.Mutate(testCtx(t), "nope", func(sb *sandbox.Sandbox) (store.Mutation, error) {
		called = true
		return store.Mutation{}, nil
	})
	if !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Mutate of a missing record = %v, want ErrNotFound", err)
	}
	if called {
		t.Error("Mutate called fn for a missing record")
	}
}

// MutateNamed finds a record as a caller names it: by name first (even a
// name that is another sandbox's id), else by id.
func TestMutateNamed(t *testing.T) {
	s := newStore(t)
	first := newSandbox("web", t0)
	create(t, s, first)
	second := newSandbox(first.ID, t0) // named as the first one's id
	create(t, s, second)
	mutated := func(key string) string {
		t.Helper()
		got, err := s.MutateNamed(testCtx(t), "", key, func(sb *sandbox.Sandbox) (store.Mutation, error) {
			sb.Reason = "changed through " + key
			return store.Mutation{}, nil
		})
		if err != nil {
			t.Fatalf("MutateNamed(%q): %v", key, err)
		}
		if stored := get(t, s, got.ID); stored.Reason != "changed through "+key {
			t.Fatalf("MutateNamed(%q) changed %s, but the stored record's reason is %q", key, got.ID, stored.Reason)
		}
		return got.ID
	}
	if id := mutated("web"); id != first.ID {
		t.Errorf("by name: changed %s, want %s", id, first.ID)
	}
	if id := mutated(first.ID); id != second.ID {
		t.Errorf("by a name that is also an id: changed %s, want the one of that name, %s", id, second.ID)
	}
	if id := mutated(second.ID); id != second.ID {
		t.Errorf("by id: changed %s, want %s", id, second.ID)
	}
	_, err := s.MutateNamed(testCtx(t), "", "nope", func(sb *sandbox.Sandbox) (store.Mutation, error) {
		t.Error("MutateNamed called fn for a missing record")
		return store.Mutation{}, nil
	})
	if !errors.Is(err, errdefs.ErrNotFound) || !strings.Contains(err.Error(), `nope`) {
		t.Errorf("MutateNamed of a missing record = %v, want ErrNotFound naming it", err)
	}
}

func TestMutateSettleRequests(t *testing.T) {
	s := newStore(t)
	sb := newSandbox("web", t0)
	createReq := create(t, s, sb)
	failedAt := t0.Add(time.Second)
	failed := newOp(sb.ID, sandbox.OpStart, "me", t0)
	failed.State, failed.FinishedAt, failed.Error = sandbox.OpFailed, failedAt, "no luck"
	put(t, s, failed)
	driverOp := put(t, s, newOp(sb.ID, sandbox.OpDriverStart, "me", t0))

	at := t0.Add(time.Minute)
	got, err := s.Mutate(testCtx(t), sb.ID, func(sb *sandbox.Sandbox) (store.Mutation, error) {
		sb.Phase = sandbox.PhaseReady
		sb.UpdatedAt = at
		return store.Mutation{SettleRequests: sandbox.OpSucceeded}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got.Phase != sandbox.PhaseReady {
		t.Errorf("Mutate returned phase %s", got.Phase)
	}
	if o := opByID(t, s, sb.ID, createReq.ID); o.State != sandbox.OpSucceeded || !o.FinishedAt.Equal(at) {
		t.Errorf("pending create request is %s finished %v, want succeeded at %v", o.State, o.FinishedAt, at)
	}
	if o := opByID(t, s, sb.ID, failed.ID); o.State != sandbox.OpFailed || !o.FinishedAt.Equal(failedAt) || o.Error != "no luck" {
		t.Errorf("settled request was changed: %+v", o)
	}
	if o := opByID(t, s, sb.ID, driverOp.ID); o.State != sandbox.OpPending || !o.FinishedAt.IsZero() {
		t.Errorf("driver entry is %s, want it left pending", o.State)
	}
}

func TestPutOperationNeedsDeadline(t *testing.T) {
	s := newStore(t)
	sb := newSandbox("web", t0)
	create(t, s, sb)

	op := newOp(sb.ID, sandbox.OpStart, "me", t0)
	op.Deadline = time.Time{}
	if err := s.PutOperation(testCtx(t), op); err == nil {
		t.Error("PutOperation without a deadline succeeded")
	} else if !strings.Contains(err.Error(), "deadline") || !strings.Contains(err.Error(), sb.ID) {
		t.Errorf("PutOperation without a deadline: %q does not name the sandbox and the missing deadline", err)
	}
	if n := len(ops(t, s, sb.ID)); n != 1 {
		t.Errorf("journal has %d entries, want only the create request", n)
	}

	err := writeSQL(t, s, `INSERT INTO operations (sandbox_id, kind, state, owner, attempt, generation, started_at, deadline)
		VALUES (?, 'start', 'pending', 'me', 1, 1, 1, 0)`, sb.ID)
	if err == nil || !strings.Contains(err.Error(), "CHECK") {
		t.Errorf("insert with deadline 0 = %v, want a CHECK constraint failure", err)
	}
	if n := len(ops(t, s, sb.ID)); n != 1 {
		t.Errorf("journal has %d entries, want only the create request", n)
	}
}

func TestPutOperationUpdates(t *testing.T) {
	s := newStore(t)
	sb := newSandbox("web", t0)
	create(t, s, sb)
	op := put(t, s, newOp(sb.ID, sandbox.OpDriverStart, "me", t0))
	id := op.ID
	op.State, op.FinishedAt, op.Error, op.Attempt = sandbox.OpFailed, t0.Add(time.Second), "boom", 2
	put(t, s, op)
	if op.ID != id {
		t.Errorf("update changed the id from %d to %d", id, op.ID)
	}
	journal := ops(t, s, sb.ID)
	if len(journal) != 2 {
		t.Fatalf("journal has %d entries, want 2", len(journal))
	}
	got := journal[1]
	if got.ID != id || got.State != sandbox.OpFailed || got.Error != "boom" || got.Attempt != 2 || !got.FinishedAt.Equal(t0.Add(time.Second)) {
		t.Errorf("updated entry = %+v", got)
	}
}

func TestPutOperationNeedsSandbox(t *testing.T) {
	s := newStore(t)
	if err := s.PutOperation(testCtx(t), newOp(sandbox.NewID(), sandbox.OpDriverStart, "me", t0)); err == nil {
		t.Error("PutOperation for a sandbox that does not exist succeeded; foreign keys are off")
	}
}

func TestSettlePendingByOwner(t *testing.T) {
	for _, tc := range []struct {
		name     string
		owners   store.Owners
		settled  []string // owners whose pending entries are settled
		untouchd []string
	}{
		{"is not me", store.Owners{IsNot: "me"}, []string{"other", "third"}, []string{"me"}},
		{"is me", store.Owners{Is: "me"}, []string{"me"}, []string{"other", "third"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t)
			sb := newSandbox("web", t0)
			create(t, s, sb) // pending, owner me
			pending := map[string][]*sandbox.Operation{}
			for _, owner := range []string{"me", "other", "third"} {
				pending[owner] = append(pending[owner], put(t, s, newOp(sb.ID, sandbox.OpDriverStart, owner, t0)))
			}
			withErr := newOp(sb.ID, sandbox.OpDriverStop, "other", t0)
			withErr.Error = "slow"
			pending["other"] = append(pending["other"], put(t, s, withErr))
			withErr2 := newOp(sb.ID, sandbox.OpDriverStop, "me", t0)
			withErr2.Error = "slow"
			pending["me"] = append(pending["me"], put(t, s, withErr2))
			done := newOp(sb.ID, sandbox.OpStart, "other", t0)
			done.State, done.FinishedAt = sandbox.OpSucceeded, t0.Add(time.Second)
			put(t, s, done)
			doneMe := newOp(sb.ID, sandbox.OpStart, "me", t0)
			doneMe.State, doneMe.FinishedAt = sandbox.OpSucceeded, t0.Add(time.Second)
			put(t, s, doneMe)

			at := t0.Add(time.Hour)
			n, err := s.SettlePending(testCtx(t), tc.owners, sandbox.OpInterrupted, at, "gateway restarted")
			if err != nil {
				t.Fatal(err)
			}
			want := 0
			for _, owner := range tc.settled {
				want += len(pending[owner])
			}
			if slices.Contains(tc.settled, "me") {
				want++ // the create request
			}
			if n != want {
				t.Errorf("SettlePending settled %d entries, want %d", n, want)
			}

			byID := map[int64]*sandbox.Operation{}
			for _, o := range ops(t, s, sb.ID) {
				byID[o.ID] = o
			}
			for _, owner := range tc.settled {
				for _, p := range pending[owner] {
					o := byID[p.ID]
					if o.State != sandbox.OpInterrupted || !o.FinishedAt.Equal(at) {
						t.Errorf("%s's entry %d is %s finished %v, want interrupted at %v", owner, o.ID, o.State, o.FinishedAt, at)
					}
					wantErr := "gateway restarted"
					if p.Error != "" {
						wantErr = p.Error + "; gateway restarted"
					}
					if o.Error != wantErr {
						t.Errorf("%s's entry %d has error %q, want %q", owner, o.ID, o.Error, wantErr)
					}
				}
			}
			for _, owner := range tc.untouchd {
				for _, p := range pending[owner] {
					if o := byID[p.ID]; o.State != sandbox.OpPending || !o.FinishedAt.IsZero() || o.Error != p.Error {
						t.Errorf("%s's entry %d was changed: %+v", owner, o.ID, o)
					}
				}
			}
			for _, d := range []*sandbox.Operation{done, doneMe} {
				if o := byID[d.ID]; o.State != sandbox.OpSucceeded || !o.FinishedAt.Equal(d.FinishedAt) || o.Error != "" {
					t.Errorf("settled entry %d was changed: %+v", o.ID, o)
				}
			}
		})
	}
}

func TestDeleteSandbox(t *testing.T) {
	s := newStore(t)
	sb := newSandbox("web", t0)
	create(t, s, sb)
	put(t, s, newOp(sb.ID, sandbox.OpDriverCreate, "me", t0))
	keep := newSandbox("db", t0)
	create(t, s, keep)

	if err := s.DeleteSandbox(testCtx(t), sb.ID); err != nil {
		t.Fatalf("DeleteSandbox: %v", err)
	}
	_, err := s.GetSandbox(testCtx(t), sb.ID)
	if !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("GetSandbox after delete = %v, want ErrNotFound", err)
	}
	if want := `sandbox "` + sb.ID + `" not found`; err.Error() != want {
		t.Errorf("GetSandbox after delete says %q, want %q", err, want)
	}
	if _, err := s.GetSandboxByName(testCtx(t), "", "web"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("GetSandboxByName after delete = %v, want ErrNotFound", err)
	}
	if o := ops(t, s, sb.ID); len(o) != 0 {
		t.Errorf("journal of a deleted sandbox has %d entries", len(o))
	}
	var left int
	if err := s.db.QueryRow("SELECT count(*) FROM operations WHERE sandbox_id = ?", sb.ID).Scan(&left); err != nil || left != 0 {
		t.Errorf("operations rows of the deleted sandbox: %d, %v", left, err)
	}
	if o := ops(t, s, keep.ID); len(o) != 1 {
		t.Errorf("deleting one sandbox changed another's journal: %d entries", len(o))
	}
	get(t, s, keep.ID)
	if err := s.DeleteSandbox(testCtx(t), sb.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("second DeleteSandbox = %v, want ErrNotFound", err)
	}
	// The name is free again.
	create(t, s, newSandbox("web", t0.Add(time.Second)))
}

func TestListSandboxesLastRequest(t *testing.T) {
	s := newStore(t)
	a := newSandbox("a", t0)
	create(t, s, a)
	b := newSandbox("b", t0.Add(time.Second))
	bCreate := create(t, s, b)
	start := put(t, s, newOp(a.ID, sandbox.OpStart, "me", t0.Add(2*time.Second)))
	put(t, s, newOp(a.ID, sandbox.OpDriverStart, "me", t0.Add(3*time.Second)))
	put(t, s, newOp(b.ID, sandbox.OpDriverCreate, "me", t0.Add(3*time.Second)))

	list, err := s.ListSandboxes(testCtx(t), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].ID != a.ID || list[1].ID != b.ID {
		t.Fatalf("ListSandboxes = %v, want a then b", list)
	}
	if lr := list[0].LastRequest; lr == nil || lr.ID != start.ID || lr.Kind != sandbox.OpStart {
		t.Errorf("a's LastRequest = %+v, want the start request %d", lr, start.ID)
	}
	if lr := list[1].LastRequest; lr == nil || lr.ID != bCreate.ID || lr.Kind != sandbox.OpCreate {
		t.Errorf("b's LastRequest = %+v, want the create request %d", lr, bCreate.ID)
	}
	if lr := get(t, s, a.ID).LastRequest; lr == nil || lr.ID != start.ID {
		t.Errorf("GetSandbox(a).LastRequest = %+v, want the start request %d", lr, start.ID)
	}
}

func TestIntegrityCheck(t *testing.T) {
	s := newStore(t)
	create(t, s, newSandbox("web", t0))
	if err := s.IntegrityCheck(testCtx(t)); err != nil {
		t.Errorf("IntegrityCheck on a fresh store: %v", err)
	}
}

// A store's identity is made once, kept across opens, and another store's
// differs.
func TestIdentityIsMadeOnceAndKept(t *testing.T) {
	path := filepath.Join(t.TempDir(), "corral.db")
	s := openStore(t, path)
	id, err := s.Identity(testCtx(t))
	if err != nil || len(id) != 16 {
		t.Fatalf("Identity = %q, %v; want 16 hex digits", id, err)
	}
	s.Close()
	again, err := openStore(t, path).Identity(testCtx(t))
	if err != nil || again != id {
		t.Errorf("after a reopen Identity = %q, %v; want %q", again, err, id)
	}
	if other, err := newStore(t).Identity(testCtx(t)); err != nil || other == id {
		t.Errorf("another store's identity = %q, %v; want another than %q", other, err, id)
	}
}
