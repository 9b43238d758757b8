package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/internal/testenv"
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
	startGateway(t, home, "--store", url)
	if sb := getJSON(t, home, "pg-one"); sb["phase"] != "ready" || sb["generation"] != float64(1) {
		t.Errorf("after a SIGKILL and a restart on PostgreSQL: phase %v, generation %v", sb["phase"], sb["generation"])
	}
	if out := mustCorral(t, home, "sandbox", "history", "pg-one"); !strings.Contains(out, "create") {
		t.Errorf("the journal on PostgreSQL lacks the create:\n%s", out)
	}
	mustCorral(t, home, "sandbox", "stop", "pg-one")
	mustCorral(t, home, "sandbox", "delete", "pg-one")

	bad := launch(t, t.TempDir(), "--store", "mysql://root:hunter2@db/corral")
	if code := bad.exitCode(30 * time.Second); code == 0 || !strings.Contains(bad.logs.String(), "want sqlite://PATH or postgres://") || strings.Contains(bad.logs.String(), "hunter2") {
		t.Errorf("a store URL of another kind: exit %d\n%s", code, bad.logs.String())
	}
}
