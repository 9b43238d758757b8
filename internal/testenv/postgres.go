package testenv

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"net/url"
	"sync"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver
)

// PostgresEnv names the URL of a PostgreSQL server the tests may make
// databases on (its maintenance database, as a superuser), which .ci/run
// starts on a port of its own.
const PostgresEnv = "CORRAL_TEST_POSTGRES"

// RequirePostgres returns the server's URL of PostgresEnv, or skips t
// (fails it under CORRAL_REQUIRE_POSTGRES=1) when none is given.
func RequirePostgres(t testing.TB) string {
	t.Helper()
	return requireSetting(t, PostgresEnv, "CORRAL_REQUIRE_POSTGRES", "a PostgreSQL server: set it to its URL")
}

var made sync.Map // database name -> true, made in this process

// PostgresDatabase returns the URL of a database of the server of
// PostgresEnv for test t and key: empty when first asked for in this
// process, the same one after; it is dropped when t ends.
func PostgresDatabase(t testing.TB, key string) string {
	t.Helper()
	server := RequirePostgres(t)
	sum := sha256.Sum256([]byte(t.Name() + "\x00" + key))
	name := "corral_test_" + hex.EncodeToString(sum[:12])
	u, err := url.Parse(server)
	if err != nil {
		t.Fatalf("%s: %v", PostgresEnv, err)
	}
	if _, loaded := made.LoadOrStore(name, true); !loaded {
		admin(t, server, `DROP DATABASE IF EXISTS `+name+` WITH (FORCE)`, `CREATE DATABASE `+name)
		t.Cleanup(func() {
			made.Delete(name)
			admin(t, server, `DROP DATABASE IF EXISTS `+name+` WITH (FORCE)`)
		})
	}
	u.Path = "/" + name
	return u.String()
}

// admin runs statements on the server's maintenance database.
func admin(t testing.TB, server string, stmts ...string) {
	t.Helper()
	db, err := sql.Open("pgx", server)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, s := range stmts {
		if _, err := db.ExecContext(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}
