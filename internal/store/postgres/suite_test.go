package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/internal/store"
	"github.com/corral-sandbox/corral/internal/store/storetest"
	"github.com/corral-sandbox/corral/internal/testenv"
)

// openStore opens the store of test t's database key, closed when t ends.
func openStore(t *testing.T, key string) *Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := Open(ctx, testenv.PostgresDatabase(t, key))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// The shared store suite, on databases of a real PostgreSQL server.
func TestStoreSuite(t *testing.T) {
	testenv.RequirePostgres(t)
	storetest.Run(t, func(t *testing.T, name string) store.Store { return openStore(t, name) })
}
