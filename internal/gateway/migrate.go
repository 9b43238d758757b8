package gateway

import (
	"context"

	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/store/migrate"
	"github.com/corral-sandbox/corral/internal/store/stores"
)

// MigrateStore carries the SQLite store from (home's when "") into the
// empty PostgreSQL store to, with no gateway running on home (its lock is
// taken for the copy) or on to (which is held as a gateway holds it), and
// returns the rows each table got.
func MigrateStore(ctx context.Context, home, from, to string) ([]TableRows, error) {
	path, err := stores.SQLitePath(from, home)
	if err != nil {
		return nil, err
	}
	if !stores.IsPostgres(to) {
		return nil, errdefs.InvalidArgument("--to %s: want the postgres://USER@HOST:PORT/DATABASE of an empty database", stores.Describe(to, home))
	}
	if err := prepareHome(home); err != nil {
		return nil, err
	}
	lock, err := lockHome(home)
	if err != nil {
		return nil, err
	}
	defer lock.release()
	return migrate.Copy(ctx, path, to)
}

// TableRows is how many rows a table of the store got.
type TableRows = migrate.Count

// CheckStoreURL reports whether url names a store this build can open.
func CheckStoreURL(url string) error { return stores.Check(url) }
