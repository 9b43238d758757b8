// Package stores opens the store a gateway's settings name: SQLite in the
// gateway's home (the default), a SQLite file elsewhere, or PostgreSQL.
package stores

import (
	"context"
	"path/filepath"
	"strings"

	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/store"
	"github.com/corral-sandbox/corral/internal/store/postgres"
	"github.com/corral-sandbox/corral/internal/store/sqlite"
)

// Check reports whether url names a store this build can open: "" (SQLite
// at HOME/corral.db), sqlite://PATH, or postgres:// (postgresql://) URL.
func Check(url string) error {
	_, _, err := parse(url)
	return err
}

// Open opens the store of url, home being the gateway's home directory.
func Open(ctx context.Context, url, home string) (store.Store, error) {
	kind, where, err := parse(url)
	if err != nil {
		return nil, err
	}
	if kind == "postgres" {
		return postgres.Open(ctx, where)
	}
	if where == "" {
		where = filepath.Join(home, "corral.db")
	}
	return sqlite.Open(ctx, where)
}

// SQLitePath is the file of the SQLite store url names (home's when url
// is ""); errdefs.ErrInvalidArgument when it names another kind.
func SQLitePath(url, home string) (string, error) {
	kind, where, err := parse(url)
	switch {
	case err != nil:
		return "", err
	case kind != "sqlite":
		return "", errdefs.InvalidArgument("%s is not a SQLite store: want sqlite://PATH", Describe(url, home))
	case where == "":
		return filepath.Join(home, "corral.db"), nil
	}
	return where, nil
}

// IsPostgres reports whether url names a PostgreSQL store.
func IsPostgres(url string) bool {
	kind, _, err := parse(url)
	return err == nil && kind == "postgres"
}

// Describe is url as a log or an error may show it: no password.
func Describe(url, home string) string {
	kind, where, err := parse(url)
	switch {
	case err != nil:
		return "(an invalid store URL)"
	case kind == "postgres":
		return postgres.Redact(where)
	case where == "":
		return "sqlite://" + filepath.Join(home, "corral.db")
	}
	return "sqlite://" + where
}

func parse(url string) (kind, where string, err error) {
	switch {
	case url == "":
		return "sqlite", "", nil
	case strings.HasPrefix(url, "sqlite://"):
		path := strings.TrimPrefix(url, "sqlite://")
		if path == "" {
			return "", "", errdefs.InvalidArgument("store_url %q: give the database file's path, as sqlite:///var/lib/corral/corral.db", url)
		}
		return "sqlite", path, nil
	case strings.HasPrefix(url, "postgres://"), strings.HasPrefix(url, "postgresql://"):
		return "postgres", url, nil
	}
	return "", "", errdefs.InvalidArgument("store_url %q: want sqlite://PATH or postgres://USER@HOST:PORT/DATABASE", redactAny(url))
}

// redactAny drops what may be a password from a URL that did not parse as
// one of ours.
func redactAny(url string) string {
	if i := strings.Index(url, "@"); i >= 0 {
		if j := strings.Index(url, "://"); j >= 0 && j < i {
			return url[:j+3] + "…" + url[i:]
		}
	}
	return url
}
