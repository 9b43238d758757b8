package postgres

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/store/storetest"
	"github.com/corral-sandbox/corral/internal/testenv"
)

func TestRebind(t *testing.T) {
	for in, want := range map[string]string{
		"SELECT ? , ?":                          "SELECT $1 , $2",
		"a = ?1 AND b = ?2 LIMIT 1 OFFSET ?3":   "a = $1 AND b = $2 LIMIT 1 OFFSET $3",
		"x = '?' AND y = ? AND \"q?\" = ?":      "x = '?' AND y = $1 AND \"q?\" = $2",
		"a = ?2, b = ?":                         "a = $2, b = $3",
		"no placeholders":                       "no placeholders",
		"json ->> 'a?b' = ? OR spec LIKE '%?%'": "json ->> 'a?b' = $1 OR spec LIKE '%?%'",
	} {
		if got := rebind(in); got != want {
			t.Errorf("rebind(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestRedactDropsThePassword(t *testing.T) {
	got := Redact("postgres://corral:s3cret@db.internal:5433/records?sslmode=require")
	if strings.Contains(got, "s3cret") || !strings.Contains(got, "corral@db.internal:5433/records") {
		t.Errorf("Redact = %q", got)
	}
}

// Open refuses a database whose tables are not a store's, and one of a
// newer schema, and leaves both as they were.
func TestOpenRefusesForeignAndNewerDatabases(t *testing.T) {
	ctx := context.Background()
	foreign := testenv.PostgresDatabase(t, "foreign")
	exec(t, foreign, "CREATE TABLE accounts (id int)")
	if _, err := Open(ctx, foreign); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "not a corral store") {
		t.Errorf("Open of a foreign database: %v", err)
	}
	if n := count(t, foreign, "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'"); n != 1 {
		t.Errorf("the foreign database has %d tables after the refusal, want its 1", n)
	}

	newer := testenv.PostgresDatabase(t, "newer")
	openStore(t, "newer").Close()
	exec(t, newer, "UPDATE schema_version SET version = version + 1")
	if _, err := Open(ctx, newer); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "newer") {
		t.Errorf("Open of a newer schema: %v", err)
	}
}

// Gateways opening one empty database at once migrate it once.
func TestConcurrentOpensMigrateOnce(t *testing.T) {
	url := testenv.PostgresDatabase(t, "shared")
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			s, err := Open(context.Background(), url)
			if err == nil {
				s.Close()
			}
			errs <- err
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if n := count(t, url, "SELECT count(*) FROM identity"); n != 1 {
		t.Errorf("%d identities after concurrent opens, want 1", n)
	}
}

// Hold admits one holder of a database at a time: a second waits for the
// first to go and takes the hold then, or is refused once the first has
// kept it for the whole wait.
func TestHoldIsExclusive(t *testing.T) {
	ctx := context.Background()
	a, b := openStore(t, "held"), openStore(t, "held")
	if err := a.Hold(ctx, func(err error) { t.Errorf("the first holder lost its hold: %v", err) }); err != nil {
		t.Fatal(err)
	}
	if err := b.Hold(ctx, nil); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "another gateway") {
		t.Errorf("a second Hold: %v", err)
	}
	held := make(chan error, 1)
	go func() { held <- b.Hold(ctx, func(err error) { t.Errorf("the second holder lost its hold: %v", err) }) }()
	time.Sleep(2 * time.Second)
	a.Close()
	if err := <-held; err != nil {
		t.Errorf("a Hold waiting for the holder to close: %v", err)
	}
}

// A holder whose session the server ended is told at once that its hold
// is lost.
func TestHoldLostWithItsSession(t *testing.T) {
	url := testenv.PostgresDatabase(t, "lost")
	s := openStore(t, "lost")
	lost := make(chan error, 1)
	if err := s.Hold(context.Background(), func(err error) { lost <- err }); err != nil {
		t.Fatal(err)
	}
	before := storetest.NewSandbox("before", storetest.T0)
	storetest.Create(t, s, before)
	exec(t, url, "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) AND pid <> pg_backend_pid()")
	// refused at once, before the holder has been told
	after := storetest.NewSandbox("after", storetest.T0)
	if _, _, err := s.CreateSandbox(storetest.Ctx(t), after, storetest.NewOp(after.ID, "create", "me", storetest.T0)); err == nil || !strings.Contains(err.Error(), "no longer holds the store") {
		t.Errorf("a write after the hold ended: %v; want it refused", err)
	}
	select {
	case err := <-lost:
		t.Logf("lost: %v", err)
	case <-time.After(holdFence):
		t.Fatal("the holder was not told that its session ended")
	}
}

func exec(t *testing.T, url, stmt string) {
	t.Helper()
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(stmt); err != nil {
		t.Fatalf("%s: %v", stmt, err)
	}
}

func count(t *testing.T, url, query string) int {
	t.Helper()
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow(query).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}
