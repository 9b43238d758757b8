package main

import (
	"database/sql"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/internal/testenv"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver
)

// A gateway on a PostgreSQL store (--store): its records and journal are
// there and not in its home, a SIGKILL and a restart find them, a second
// gateway on the same store is refused saying why, and a store URL of
// another kind is refused at start.
func TestGatewayOnPostgres(t *testing.T) {
	url := testenv.PostgresDatabase(t, "gateway")
	home := t.TempDir()
	g := startGateway(t, home, "--store", url)
	mustCorral(t, home, "sandbox", "create", "--name", "pg-one")
	if _, err := os.Stat(filepath.Join(home, "corral.db")); !os.IsNotExist(err) {
		t.Errorf("a gateway on PostgreSQL made a SQLite store in its home: %v", err)
	}

	second := launch(t, t.TempDir(), "--store", url)
	if code := second.exitCode(30 * time.Second); code == 0 || !strings.Contains(second.logs.String(), "another gateway uses the store") {
		t.Errorf("a second gateway on the same store: exit %d\n%s", code, second.logs.String())
	}

	g.signal(syscall.SIGKILL)
	g.exitCode(30 * time.Second)
	g = startGateway(t, home, "--store", url)
	if sb := getJSON(t, home, "pg-one"); sb["phase"] != "ready" || sb["generation"] != float64(1) {
		t.Errorf("after a SIGKILL and a restart on PostgreSQL: phase %v, generation %v", sb["phase"], sb["generation"])
	}
	if out := mustCorral(t, home, "sandbox", "history", "pg-one"); !strings.Contains(out, "create") {
		t.Errorf("the journal on PostgreSQL lacks the create:\n%s", out)
	}
	// A gateway that loses its hold of the store (the server ended the
	// session) exits at once; the next one takes the store over.
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory'
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) AND pid <> pg_backend_pid()`); err != nil {
		t.Fatal(err)
	}
	if code := g.exitCode(10 * time.Second); code == 0 || !strings.Contains(g.logs.String(), "lost the hold of the store") {
		t.Errorf("a gateway whose hold ended: exit %d\n%s", code, g.logs.String())
	}
	startGateway(t, home, "--store", url)
	mustCorral(t, home, "sandbox", "stop", "pg-one")
	mustCorral(t, home, "sandbox", "delete", "pg-one")

	bad := launch(t, t.TempDir(), "--store", "mysql://root:hunter2@db/corral")
	if code := bad.exitCode(30 * time.Second); code == 0 || !strings.Contains(bad.logs.String(), "want sqlite://PATH or postgres://") || strings.Contains(bad.logs.String(), "hunter2") {
		t.Errorf("a store URL of another kind: exit %d\n%s", code, bad.logs.String())
	}
}

// migrate-store carries a gateway's SQLite store into PostgreSQL: the
// gateway started on it afterwards has the same sandboxes, running as
// they were (the identity came along, so its compute objects are still
// its own), with their journals; a migration while a gateway runs on the
// home is refused.
func TestMigrateStoreThroughCLI(t *testing.T) {
	url := testenv.PostgresDatabase(t, "migrated")
	home := t.TempDir()
	g := startGateway(t, home)
	mustCorral(t, home, "sandbox", "create", "--name", "kept-1")
	mustCorral(t, home, "sandbox", "create", "--name", "kept-2")
	mustCorral(t, home, "sandbox", "stop", "kept-2")
	before := mustCorral(t, home, "sandbox", "history", "kept-1")
	if _, errOut, code := corral(t, home, "gateway", "migrate-store", "--to", url); code == 0 || !strings.Contains(errOut, "another gateway") {
		t.Errorf("migrate-store with the gateway running: exit %d, %q", code, errOut)
	}
	g.signal(syscall.SIGTERM)
	if code := g.exitCode(30 * time.Second); code != 0 {
		t.Fatalf("gateway exit %d", code)
	}

	out := mustCorral(t, home, "gateway", "migrate-store", "--to", url)
	if !regexp.MustCompile(`(?m)^sandboxes\s+2$`).MatchString(out) || !regexp.MustCompile(`(?m)^identity\s+1$`).MatchString(out) {
		t.Errorf("migrate-store printed:\n%s", out)
	}
	startGateway(t, home, "--store", url)
	if sb := getJSON(t, home, "kept-1"); sb["phase"] != "ready" || sb["generation"] != float64(1) {
		t.Errorf("kept-1 on PostgreSQL: phase %v, generation %v", sb["phase"], sb["generation"])
	}
	if sb := getJSON(t, home, "kept-2"); sb["phase"] != "stopped" {
		t.Errorf("kept-2 on PostgreSQL: phase %v", sb["phase"])
	}
	if after := mustCorral(t, home, "sandbox", "history", "kept-1"); !strings.HasPrefix(after, strings.TrimSpace(before)) {
		t.Errorf("kept-1's journal on PostgreSQL:\n%s\nwant it to begin with the one on SQLite:\n%s", after, before)
	}
	mustCorral(t, home, "sandbox", "exec", "kept-1", "--", "true")
}
