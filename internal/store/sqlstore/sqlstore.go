// Package sqlstore is store.Store over SQL, for every database a store
// keeps its records in (SQLite, PostgreSQL): the records, journal,
// tenants, pools, ports, secrets, ledgers and snapshots, as statements in
// the SQL both understand, with ? (or ?N) placeholders. A Backend runs
// them: how a transaction is made durable and kept apart from the others
// is the database's.
package sqlstore

import (
	"context"
	"database/sql"
	"sync"
)

// Querier runs statements of the store's SQL.
type Querier interface {
	Exec(ctx context.Context, query string, args ...any) (sql.Result, error)
	Query(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRow(ctx context.Context, query string, args ...any) Scanner
}

// Scanner is a row to read.
type Scanner interface{ Scan(dest ...any) error }

// FailedRow is a row that could not be queried: its Scan returns err.
func FailedRow(err error) Scanner { return failedRow{err} }

type failedRow struct{ err error }

func (r failedRow) Scan(...any) error { return r.err }

// Backend is a database a Store runs on.
type Backend interface {
	// Write runs fn as one transaction, as if alone (serializable), and
	// returns once it is durable, or has failed and left nothing. fn may
	// run more than once (a backend retries a transaction its database
	// gave up on), so it changes nothing but through q.
	Write(ctx context.Context, fn func(q Querier) error) error
	// Grow is Write for a write that adds a sandbox or a pool, which a
	// backend may refuse while it keeps its space for the writes that end
	// sandboxes.
	Grow(ctx context.Context, fn func(q Querier) error) error
	// Reads runs reads outside any write.
	Reads() Querier
	// PoolLabel is the SQL expression of the value of the pool label
	// (sandbox.LabelPool) in a sandboxes row's spec, a JSON text.
	PoolLabel() string
	// ByIndex is what follows a table's name in a statement that must go
	// through its index name ("INDEXED BY name" where the planner would
	// pick another, else "").
	ByIndex(name string) string
}

// Store implements store.Store, but Close, on a Backend.
type Store struct {
	b Backend

	// appended counts the ledgers' rows added since they were last
	// trimmed (ledger.go).
	mu       sync.Mutex
	appended map[string]int
}

// New is a Store on b.
func New(b Backend) *Store { return &Store{b: b, appended: map[string]int{}} }
