// Package migrate carries a SQLite store into PostgreSQL: every row of
// every table, ids included, so that the journal, the tokens' ids, the
// ledgers' sequence numbers and the store's identity (on every compute
// object of the gateway) are what they were.
package migrate

import (
	"context"
	"database/sql"

	"fmt"
	"strings"

	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/store/postgres"
	"github.com/corral-sandbox/corral/internal/store/sqlite"
)

// Tables are the store's tables in the order they are copied: a row
// after the rows it refers to.
var Tables = []string{"identity", "tenants", "sandboxes", "operations", "gateway_events", "exposed_ports", "pools",
	"secrets", "credential_uses", "egress_denials", "tokens", "snapshots"}

// made are the rows a new store's schema makes, which the copy replaces.
var made = map[string]bool{"identity": true, "tenants": true}

// Count is how many rows a table got.
type Count struct {
	Table string
	Rows  int
}

// Copy copies the SQLite store at path into the PostgreSQL store at url,
// which must be empty (as its migrations leave it), in one transaction of
// PostgreSQL, and returns how many rows each table got, in Tables' order. The source is
// brought to the current schema first (SQLite's migrations, with their
// backup); nothing of it changes otherwise. The target is held as a
// gateway holds it: a gateway running on it is refused.
func Copy(ctx context.Context, path, url string) ([]Count, error) {
	src, err := sqlite.Open(ctx, path)
	if err != nil {
		return nil, err
	}
	if err := src.Close(); err != nil {
		return nil, err
	}
	from, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		return nil, err
	}
	defer from.Close()
	dst, err := postgres.Open(ctx, url)
	if err != nil {
		return nil, err
	}
	defer dst.Close()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if _, err := dst.Hold(ctx, postgres.Lease{Me: sandbox.Replica{ID: "migrate-store"}}, cancel); err != nil { // a hold lost ends the copy's transaction
		return nil, err
	}
	to, err := sql.Open("pgx", url)
	if err != nil {
		return nil, err
	}
	defer to.Close()
	tx, err := to.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	counts := map[string]int{}
	for _, table := range Tables {
		if err := empty(ctx, tx, table); err != nil {
			return nil, err
		}
		if counts[table], err = copyTable(ctx, from, tx, table); err != nil {
			return nil, fmt.Errorf("copy %s: %w", table, err)
		}
	}
	for _, table := range Tables {
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM `+table).Scan(&n); err != nil {
			return nil, err
		}
		if n != counts[table] {
			return nil, fmt.Errorf("%s: %d rows copied but %d in PostgreSQL", table, counts[table], n)
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, err
	}
	out := make([]Count, len(Tables))
	for i, table := range Tables {
		out[i] = Count{table, counts[table]}
	}
	return out, nil
}

// empty checks that table holds nothing but what a new schema makes, and
// removes that.
func empty(ctx context.Context, tx *sql.Tx, table string) error {
	if made[table] {
		if table == "tenants" {
			var other int
			if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM tenants WHERE name <> 'default'`).Scan(&other); err != nil {
				return err
			}
			if other > 0 {
				return errdefs.FailedPrecondition("the PostgreSQL store is not empty: it has %d tenants besides default; migrate into a new database", other)
			}
		}
		_, err := tx.ExecContext(ctx, `DELETE FROM `+table)
		return err
	}
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM `+table).Scan(&n); err != nil {
		return err
	}
	if n > 0 {
		return errdefs.FailedPrecondition("the PostgreSQL store is not empty: %s has %d rows; migrate into a new database", table, n)
	}
	return nil
}

// column is a target column: its name, whether PostgreSQL keeps it as a
// boolean (SQLite as 0 or 1) and whether PostgreSQL makes its values (an
// identity, whose sequence goes on after the copied ones).
type column struct {
	name            string
	boolean, serial bool
}

func columns(ctx context.Context, tx *sql.Tx, table string) ([]column, error) {
	rows, err := tx.QueryContext(ctx, `SELECT column_name, data_type, is_identity FROM information_schema.columns
		WHERE table_schema = current_schema() AND table_name = $1 ORDER BY ordinal_position`, table)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var cols []column
	for rows.Next() {
		var name, typ, identity string
		if err := rows.Scan(&name, &typ, &identity); err != nil {
			return nil, err
		}
		cols = append(cols, column{name: name, boolean: typ == "boolean", serial: identity == "YES"})
	}
	if len(cols) == 0 && rows.Err() == nil {
		return nil, fmt.Errorf("PostgreSQL has no table %s", table)
	}
	return cols, rows.Err()
}

// copyTable copies every row of table, and moves its identity's sequence
// past the copied values.
func copyTable(ctx context.Context, from *sql.DB, tx *sql.Tx, table string) (int, error) {
	cols, err := columns(ctx, tx, table)
	if err != nil {
		return 0, err
	}
	names := make([]string, len(cols))
	marks := make([]string, len(cols))
	var serial string
	for i, c := range cols {
		names[i], marks[i] = c.name, fmt.Sprintf("$%d", i+1)
		if c.serial {
			serial = c.name
		}
	}
	list := strings.Join(names, ", ")
	rows, err := from.QueryContext(ctx, `SELECT `+list+` FROM `+table)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	insert := `INSERT INTO ` + table + ` (` + list + `) OVERRIDING SYSTEM VALUE VALUES (` + strings.Join(marks, ", ") + `)`
	n := 0
	vals := make([]any, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return n, err
		}
		for i, c := range cols {
			if c.boolean {
				v, ok := vals[i].(int64)
				if !ok {
					return n, fmt.Errorf("column %s: %v is not SQLite's 0 or 1", c.name, vals[i])
				}
				vals[i] = v != 0
			}
		}
		if _, err := tx.ExecContext(ctx, insert, vals...); err != nil {
			return n, err
		}
		n++
	}
	if err := rows.Err(); err != nil {
		return n, err
	}
	if serial != "" {
		_, err := tx.ExecContext(ctx, `SELECT setval(pg_get_serial_sequence($1, $2), coalesce((SELECT max(`+serial+`) FROM `+table+`), 0) + 1, false)`, table, serial)
		if err != nil {
			return n, err
		}
	}
	return n, nil
}
