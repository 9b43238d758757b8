package postgres

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/sandbox"
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

// Hold admits one holder of a database at a time: a second that does not
// wait is refused once the first has kept it for the TTL and a little; one
// that waits is told whose it is, and takes it once the first lets go,
// with a greater epoch.
func TestHoldIsExclusive(t *testing.T) {
	ctx := context.Background()
	a, b := openStore(t, "held"), openStore(t, "held")
	ra, rb := replica("a", "/home/one"), replica("b", "/home/one")
	joinStore(t, a, ra)
	joinStore(t, b, rb)
	first, err := a.Hold(ctx, Lease{Me: ra, TTL: 2 * time.Second}, func(err error) { t.Errorf("the first holder lost its hold: %v", err) })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Hold(ctx, Lease{Me: rb, TTL: 2 * time.Second}, nil); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "another gateway") {
		t.Errorf("a second Hold: %v", err)
	}
	told := make(chan sandbox.Replica, 1)
	type held struct {
		epoch int64
		err   error
	}
	got := make(chan held, 1)
	go func() {
		e, err := b.Hold(ctx, Lease{Me: rb, TTL: 2 * time.Second, Wait: true, Waiting: func(h sandbox.Replica) { told <- h }},
			func(err error) { t.Errorf("the second holder lost its hold: %v", err) })
		got <- held{e, err}
	}()
	if h := <-told; h.ID != "a" {
		t.Errorf("the waiting replica was told the hold is %q's, want a's", h.ID)
	}
	rs, err := b.Replicas(ctx)
	if err != nil || len(rs) != 2 || rs[0].ID != "a" || !rs[0].Leader || rs[0].Epoch != first || rs[1].Leader {
		t.Errorf("replicas while a holds the store: %+v, %v", rs, err)
	}
	a.Close()
	h := <-got
	if h.err != nil || h.epoch <= first {
		t.Errorf("a Hold waiting for the holder to close: epoch %d (the first's %d), %v", h.epoch, first, h.err)
	}
	if rs, err := b.Replicas(ctx); err != nil || len(rs) == 0 || rs[0].ID != "b" || !rs[0].Leader || rs[0].Epoch != h.epoch {
		t.Errorf("replicas once b holds the store: %+v, %v", rs, err)
	}
}

// A gateway of another home than the holder's is refused at once, naming
// the holder's host and home: replicas share one home.
func TestHoldRefusesAnotherHome(t *testing.T) {
	ctx := context.Background()
	a, b := openStore(t, "homes"), openStore(t, "homes")
	ra, rb := replica("a", "/home/one"), replica("b", "/home/two")
	joinStore(t, a, ra)
	if _, err := a.Hold(ctx, Lease{Me: ra}, func(error) {}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err := b.Hold(ctx, Lease{Me: rb, Wait: true}, nil)
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "--home /home/one") || time.Since(start) > DefaultTTL {
		t.Errorf("a Hold from another home: %v", err)
	}
}

func replica(id, home string) sandbox.Replica {
	return sandbox.Replica{ID: id, PID: os.Getpid(), Host: "here", Home: home, StartedAt: time.Now()}
}

func joinStore(t *testing.T, s *Store, r sandbox.Replica) {
	t.Helper()
	leave, err := s.Join(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(leave)
}

// A holder whose session the server ended is told at once that its hold
// is lost.
func TestHoldLostWithItsSession(t *testing.T) {
	url := testenv.PostgresDatabase(t, "lost")
	s := openStore(t, "lost")
	lost := make(chan error, 1)
	if _, err := s.Hold(context.Background(), Lease{Me: replica("lost", "/home/one")}, func(err error) { lost <- err }); err != nil {
		t.Fatal(err)
	}
	before := storetest.NewSandbox("before", storetest.T0)
	storetest.Create(t, s, before)
	// the session ends (its server process has exited, waited for up to
	// 10 s), and with it the lock
	exec(t, url, "SELECT pg_terminate_backend(pid, 10000) FROM pg_locks WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) AND pid <> pg_backend_pid()")
	// refused at once, before the holder has been told
	after := storetest.NewSandbox("after", storetest.T0)
	if _, _, err := s.CreateSandbox(storetest.Ctx(t), after, storetest.NewOp(after.ID, "create", "me", storetest.T0)); err == nil || !strings.Contains(err.Error(), "no longer holds the store") {
		t.Errorf("a write after the hold ended: %v; want it refused", err)
	}
	select {
	case err := <-lost:
		t.Logf("lost: %v", err)
	case <-time.After(DefaultTTL / 2):
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
