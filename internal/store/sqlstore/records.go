package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/store"
)

const sandboxColumns = `id, tenant, name, request_id, spec, desired_state, phase, generation, reason, exit_code, restarts, created_at, updated_at, deadline, revision, memory, cpu_millis, disk, pause_memory`

const operationColumns = `id, sandbox_id, kind, state, owner, attempt, generation, started_at, deadline, finished_at, error, detail, actor, epoch`

// requestKinds is the SQL list of the request kinds of the journal.
const requestKinds = `('create','start','stop','delete','update','pause','resume')`

type scanner interface{ Scan(dest ...any) error }

// sandboxRow is a sandbox's columns as scanned.
type sandboxRow struct {
	sb                         sandbox.Sandbox
	requestID                  sql.NullString
	exitCode                   sql.NullInt64
	spec                       string
	created, updated, deadline int64
}

func (r *sandboxRow) dest() []any {
	return []any{&r.sb.ID, &r.sb.Tenant, &r.sb.Name, &r.requestID, &r.spec, &r.sb.Desired, &r.sb.Phase, &r.sb.Generation,
		&r.sb.Reason, &r.exitCode, &r.sb.Restarts, &r.created, &r.updated, &r.deadline, &r.sb.Revision,
		&r.sb.Resources.MemoryBytes, &r.sb.Resources.CPUMillis, &r.sb.Resources.DiskBytes, &r.sb.PauseMemory}
}

func (r *sandboxRow) decode() (*sandbox.Sandbox, error) {
	sb := r.sb
	if r.exitCode.Valid {
		code := int(r.exitCode.Int64)
		sb.ExitCode = &code
	}
	if err := json.Unmarshal([]byte(r.spec), &sb.Spec); err != nil {
		return nil, fmt.Errorf("sandbox %s: decode spec: %w", sb.ID, err)
	}
	sb.RequestID = r.requestID.String
	sb.CreatedAt, sb.UpdatedAt, sb.Deadline = fromNanos(r.created), fromNanos(r.updated), fromNanos(r.deadline)
	return &sb, nil
}

// operationRow is a journal entry's columns as scanned; id is NULL when a
// sandbox joined with its last request has none.
type operationRow struct {
	o                 sandbox.Operation
	id                sql.NullInt64
	started, deadline int64
	finished          sql.NullInt64
}

func (r *operationRow) dest() []any {
	return []any{&r.id, &r.o.SandboxID, &r.o.Kind, &r.o.State, &r.o.Owner, &r.o.Attempt, &r.o.Generation,
		&r.started, &r.deadline, &r.finished, &r.o.Error, &r.o.Detail, &r.o.Actor, &r.o.Epoch}
}

func (r *operationRow) decode() *sandbox.Operation {
	if !r.id.Valid {
		return nil
	}
	o := r.o
	o.ID = r.id.Int64
	o.StartedAt, o.Deadline = fromNanos(r.started), fromNanos(r.deadline)
	if r.finished.Valid {
		o.FinishedAt = fromNanos(r.finished.Int64)
	}
	return &o
}

func scanSandbox(row scanner) (*sandbox.Sandbox, error) {
	var r sandboxRow
	if err := row.Scan(r.dest()...); err != nil {
		return nil, err
	}
	return r.decode()
}

func scanOperation(row scanner) (*sandbox.Operation, error) {
	var r operationRow
	if err := row.Scan(r.dest()...); err != nil {
		return nil, err
	}
	return r.decode(), nil
}

// sandboxWithRequest selects a sandbox's columns and then its last
// request's (NULL when it has none), in one statement.
const sandboxWithRequest = `SELECT s.id, s.tenant, s.name, s.request_id, s.spec, s.desired_state, s.phase, s.generation, s.reason,
	s.exit_code, s.restarts, s.created_at, s.updated_at, s.deadline, s.revision, s.memory, s.cpu_millis, s.disk, s.pause_memory,
	o.id, coalesce(o.sandbox_id, ''), coalesce(o.kind, ''), coalesce(o.state, ''), coalesce(o.owner, ''),
	coalesce(o.attempt, 0), coalesce(o.generation, 0), coalesce(o.started_at, 0), coalesce(o.deadline, 0),
	o.finished_at, coalesce(o.error, ''), coalesce(o.detail, ''), coalesce(o.actor, ''), coalesce(o.epoch, 0)
	FROM sandboxes s LEFT JOIN operations o ON o.id = (SELECT id FROM operations
		WHERE sandbox_id = s.id AND kind IN ` + requestKinds + ` ORDER BY id DESC LIMIT 1)
	WHERE s.`

func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

func nullNanos(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixNano()
}

func nullInt(p *int) any {
	if p == nil {
		return nil
	}
	return *p
}

func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// CreateSandbox implements store.Store.
func (s *Store) CreateSandbox(ctx context.Context, sb *sandbox.Sandbox, req *sandbox.Operation) (*sandbox.Sandbox, bool, error) {
	var (
		got     *sandbox.Sandbox
		created bool
	)
	undo := idsOf([]*sandbox.Operation{req})
	err := s.b.Grow(ctx, func(q Querier) error {
		undo() // a retried attempt inserts what the failed one did
		existing, err := newSandboxName(ctx, q, sb.Tenant, sb.RequestID, sb.Name)
		if err != nil || existing != nil {
			got = existing
			return err
		}
		if err := withinQuota(ctx, q, sb.Tenant, "", &sb.Resources); err != nil {
			return err
		}
		spec, err := json.Marshal(sb.Spec)
		if err != nil {
			return err
		}
		sb.Revision = 1
		_, err = q.Exec(ctx, `INSERT INTO sandboxes (`+sandboxColumns+`) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)`,
			sb.ID, sb.Tenant, sb.Name, nullString(sb.RequestID), string(spec), sb.Desired, sb.Phase, sb.Generation,
			sb.Reason, nullInt(sb.ExitCode), sb.Restarts, nanos(sb.CreatedAt), nanos(sb.UpdatedAt), nanos(sb.Deadline), sb.Revision,
			sb.Resources.MemoryBytes, sb.Resources.CPUMillis, sb.Resources.DiskBytes, sb.PauseMemory)
		if err != nil {
			return err
		}
		if err := putOperation(ctx, q, req); err != nil {
			return err
		}
		got, created = sb, true
		c := *req
		got.LastRequest = &c
		return nil
	})
	if err != nil {
		undo()
		return nil, false, err
	}
	return got, created, nil
}

// newSandboxName checks, in a write, that a sandbox may be made in tenant
// with name for requestID: it returns the sandbox that requestID made
// there before, if one did, or errdefs.ErrAlreadyExists when another has
// the name.
func newSandboxName(ctx context.Context, q Querier, tenant, requestID, name string) (*sandbox.Sandbox, error) {
	if requestID != "" {
		existing, err := getSandbox(ctx, q, "tenant = ? AND s.request_id = ?", tenant, requestID)
		if err == nil {
			if existing.Name != name {
				return nil, errdefs.FailedPrecondition("request id %q was already used to create sandbox %q, not %q", requestID, existing.Name, name)
			}
			return existing, nil
		}
		if !errors.Is(err, errdefs.ErrNotFound) {
			return nil, err
		}
	}
	var taken int
	if err := q.QueryRow(ctx, `SELECT count(*) FROM sandboxes WHERE tenant = ? AND name = ?`, tenant, name).Scan(&taken); err != nil {
		return nil, err
	} else if taken > 0 {
		return nil, errdefs.AlreadyExists("sandbox %q already exists", name)
	}
	return nil, nil
}

// getSandbox returns the sandbox that where selects, with its last
// request.
func getSandbox(ctx context.Context, q Querier, where string, args ...any) (*sandbox.Sandbox, error) {
	sb, err := scanWithRequest(q.QueryRow(ctx, sandboxWithRequest+where, args...))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errdefs.ErrNotFound
	}
	return sb, err
}

// scanWithRequest reads a row of sandboxWithRequest: the sandbox with its
// last request.
func scanWithRequest(row scanner) (*sandbox.Sandbox, error) {
	var (
		sr sandboxRow
		or operationRow
	)
	if err := row.Scan(append(sr.dest(), or.dest()...)...); err != nil {
		return nil, err
	}
	sb, err := sr.decode()
	if err != nil {
		return nil, err
	}
	sb.LastRequest = or.decode()
	return sb, nil
}

// GetSandbox implements store.Store.
func (s *Store) GetSandbox(ctx context.Context, id string) (*sandbox.Sandbox, error) {
	sb, err := getSandbox(ctx, s.b.Reads(), "id = ?", id)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil, errdefs.NotFound("sandbox %q not found", id)
	}
	return sb, err
}

// GetSandboxByName implements store.Store.
func (s *Store) GetSandboxByName(ctx context.Context, tenant, name string) (*sandbox.Sandbox, error) {
	sb, err := getNamed(ctx, s.b.Reads(), tenant, name)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil, errdefs.NotFound("sandbox %q not found", name)
	}
	return sb, err
}

// getNamed reads the sandbox of tenant named name; tenant "" looks in
// every tenant (in one statement), and a name found in several is refused.
func getNamed(ctx context.Context, q Querier, tenant, name string) (*sandbox.Sandbox, error) {
	if tenant != "" {
		return getSandbox(ctx, q, "tenant = ? AND s.name = ?", tenant, name)
	}
	rows, err := q.Query(ctx, sandboxWithRequest+"name = ? ORDER BY s.tenant LIMIT 3", name)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var found []*sandbox.Sandbox
	for rows.Next() {
		sb, err := scanWithRequest(rows)
		if err != nil {
			return nil, err
		}
		found = append(found, sb)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	switch len(found) {
	case 0:
		return nil, errdefs.ErrNotFound
	case 1:
		return found[0], nil
	}
	some := found[0].Tenant + " and " + found[1].Tenant
	if len(found) > 2 {
		some = found[0].Tenant + ", " + found[1].Tenant + " and others"
	}
	return nil, errdefs.FailedPrecondition("sandbox name %q is taken in tenants %s: name the tenant (--tenant) or give the id", name, some)
}

// ListSandboxes implements store.Store.
func (s *Store) ListSandboxes(ctx context.Context, tenant string) ([]*sandbox.Sandbox, error) {
	rows, err := s.b.Reads().Query(ctx, `SELECT `+sandboxColumns+` FROM sandboxes WHERE ? IN ('', tenant) ORDER BY created_at, id`, tenant)
	if err != nil {
		return nil, err
	}
	var list []*sandbox.Sandbox
	byID := map[string]*sandbox.Sandbox{}
	for rows.Next() {
		sb, err := scanSandbox(rows)
		if err != nil {
			rows.Close()
			return nil, err
		}
		list = append(list, sb)
		byID[sb.ID] = sb
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	ops, err := s.b.Reads().Query(ctx, `SELECT `+operationColumns+` FROM operations WHERE id IN
		(SELECT max(id) FROM operations WHERE kind IN `+requestKinds+` AND (? = '' OR sandbox_id IN
			(SELECT id FROM sandboxes WHERE tenant = ?)) GROUP BY sandbox_id)`, tenant, tenant)
	if err != nil {
		return nil, err
	}
	defer ops.Close()
	for ops.Next() {
		o, err := scanOperation(ops)
		if err != nil {
			return nil, err
		}
		if sb := byID[o.SandboxID]; sb != nil {
			sb.LastRequest = o
		}
	}
	return list, ops.Err()
}

// Mutate implements store.Store.
func (s *Store) Mutate(ctx context.Context, id string, fn func(sb *sandbox.Sandbox) (store.Mutation, error)) (*sandbox.Sandbox, error) {
	return s.mutate(ctx, id, func(q Querier) (*sandbox.Sandbox, error) {
		return getSandbox(ctx, q, "id = ?", id)
	}, fn)
}

// MutateNamed implements store.Store.
func (s *Store) MutateNamed(ctx context.Context, tenant, nameOrID string, fn func(sb *sandbox.Sandbox) (store.Mutation, error)) (*sandbox.Sandbox, error) {
	return s.mutate(ctx, nameOrID, func(q Querier) (*sandbox.Sandbox, error) {
		sb, err := getNamed(ctx, q, tenant, nameOrID)
		if errors.Is(err, errdefs.ErrNotFound) {
			sb, err = getSandbox(ctx, q, "id = ? AND ? IN ('', tenant)", nameOrID, tenant)
		}
		return sb, err
	}, fn)
}

// mutate is Mutate of the record that find reads in the transaction (key
// names it in errors).
func (s *Store) mutate(ctx context.Context, key string, find func(q Querier) (*sandbox.Sandbox, error), fn func(sb *sandbox.Sandbox) (store.Mutation, error)) (*sandbox.Sandbox, error) {
	var (
		sb   *sandbox.Sandbox
		undo = func() {}
	)
	err := s.b.Write(ctx, func(q Querier) error {
		undo() // a retried attempt inserts what the failed one did
		undo = func() {}
		var err error
		sb, err = find(q)
		if errors.Is(err, errdefs.ErrNotFound) {
			return errdefs.NotFound("sandbox %s not found", key)
		}
		if err != nil {
			return err
		}
		held := sb.Resources
		m, err := fn(sb)
		if err != nil {
			return err
		}
		if sb.Resources != held {
			if err := withinQuota(ctx, q, sb.Tenant, sb.ID, &sb.Resources); err != nil {
				return err
			}
		}
		for _, o := range m.Put {
			if o.Kind.IsRequest() {
				return fmt.Errorf("sandbox %s: a %s request goes in Mutation.Request, not Put", sb.ID, o.Kind)
			}
		}
		undo = idsOf(m.Put)
		if err := putOperations(ctx, q, m.Put); err != nil {
			return err
		}
		sb.Revision++
		spec, err := json.Marshal(sb.Spec) // only its policy changes (UpdateSandbox)
		if err != nil {
			return err
		}
		_, err = q.Exec(ctx, `UPDATE sandboxes SET spec=?, desired_state=?, phase=?, generation=?, reason=?,
			exit_code=?, restarts=?, updated_at=?, deadline=?, revision=?, memory=?, cpu_millis=?, disk=?, pause_memory=? WHERE id=?`,
			string(spec), sb.Desired, sb.Phase, sb.Generation, sb.Reason, nullInt(sb.ExitCode), sb.Restarts, nanos(sb.UpdatedAt), nanos(sb.Deadline), sb.Revision,
			sb.Resources.MemoryBytes, sb.Resources.CPUMillis, sb.Resources.DiskBytes, sb.PauseMemory, sb.ID)
		if err != nil {
			return err
		}
		now := sb.UpdatedAt
		if m.Request != nil {
			if err := s.settleRequests(ctx, q, sb.ID, sandbox.OpSuperseded, now, "superseded by "+string(m.Request.Kind)); err != nil {
				return err
			}
			if err := putOperation(ctx, q, m.Request); err != nil {
				return err
			}
			c := *m.Request
			sb.LastRequest = &c
		}
		if m.SettleRequests != "" {
			if err := s.settleRequests(ctx, q, sb.ID, m.SettleRequests, now, ""); err != nil {
				return err
			}
			if last := sb.LastRequest; last != nil && last.State == sandbox.OpPending {
				c := *last
				c.State, c.FinishedAt = m.SettleRequests, now
				sb.LastRequest = &c
			}
		}
		return nil
	})
	if err != nil {
		undo()
		return nil, err
	}
	return sb, nil
}

// settleRequests settles the pending requests of one sandbox, through the
// index of a sandbox's entries (Backend.ByIndex).
func (s *Store) settleRequests(ctx context.Context, q Querier, id string, state sandbox.OpState, at time.Time, detail string) error {
	_, err := q.Exec(ctx, `UPDATE operations `+s.b.ByIndex("operations_by_sandbox")+` SET state=?, finished_at=?,
		detail = CASE WHEN ? = '' THEN detail ELSE ? END
		WHERE sandbox_id=? AND state='pending' AND kind IN `+requestKinds,
		state, nanos(at), detail, detail, id)
	return err
}

// DeleteSandbox implements store.Store.
func (s *Store) DeleteSandbox(ctx context.Context, id string) error {
	return s.b.Write(ctx, func(q Querier) error {
		for _, table := range []string{"operations", "egress_denials"} {
			if _, err := q.Exec(ctx, `DELETE FROM `+table+` WHERE sandbox_id = ?`, id); err != nil {
				return err
			}
		}
		res, err := q.Exec(ctx, `DELETE FROM sandboxes WHERE id = ?`, id)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return errdefs.NotFound("sandbox %s not found", id)
		}
		return nil
	})
}

// PutOperation implements store.Store.
func (s *Store) PutOperation(ctx context.Context, ops ...*sandbox.Operation) error {
	undo := idsOf(ops)
	err := s.b.Write(ctx, func(q Querier) error {
		undo() // a retried attempt inserts what the failed one did
		return putOperations(ctx, q, ops)
	})
	if err != nil {
		undo()
	}
	return err
}

// idsOf remembers the ids of ops; undo gives them back after a write that
// failed (an insert that did not commit has no id).
func idsOf(ops []*sandbox.Operation) (undo func()) {
	ids := make([]int64, len(ops))
	for i, o := range ops {
		ids[i] = o.ID
	}
	return func() {
		for i, o := range ops {
			o.ID = ids[i]
		}
	}
}

func putOperations(ctx context.Context, q Querier, ops []*sandbox.Operation) error {
	for _, o := range ops {
		if err := putOperation(ctx, q, o); err != nil {
			return err
		}
	}
	return nil
}

func putOperation(ctx context.Context, q Querier, o *sandbox.Operation) error {
	if o.Deadline.IsZero() {
		return fmt.Errorf("operation %s of sandbox %s has no deadline", o.Kind, o.SandboxID)
	}
	if o.ID != 0 {
		_, err := q.Exec(ctx, `UPDATE operations SET state=?, owner=?, attempt=?, generation=?, started_at=?,
			deadline=?, finished_at=?, error=?, detail=?, actor=?, epoch=? WHERE id=?`,
			o.State, o.Owner, o.Attempt, o.Generation, nanos(o.StartedAt), nanos(o.Deadline), nullNanos(o.FinishedAt),
			o.Error, o.Detail, o.Actor, o.Epoch, o.ID)
		return err
	}
	return q.QueryRow(ctx, `INSERT INTO operations (sandbox_id, kind, state, owner, attempt, generation,
		started_at, deadline, finished_at, error, detail, actor, epoch) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?) RETURNING id`,
		o.SandboxID, o.Kind, o.State, o.Owner, o.Attempt, o.Generation, nanos(o.StartedAt), nanos(o.Deadline),
		nullNanos(o.FinishedAt), o.Error, o.Detail, o.Actor, o.Epoch).Scan(&o.ID)
}

// ListOperations implements store.Store.
func (s *Store) ListOperations(ctx context.Context, sandboxID string) ([]*sandbox.Operation, error) {
	rows, err := s.b.Reads().Query(ctx, `SELECT `+operationColumns+` FROM operations WHERE sandbox_id = ? ORDER BY id`, sandboxID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var list []*sandbox.Operation
	for rows.Next() {
		o, err := scanOperation(rows)
		if err != nil {
			return nil, err
		}
		list = append(list, o)
	}
	return list, rows.Err()
}

// SettlePending implements store.Store.
func (s *Store) SettlePending(ctx context.Context, owners store.Owners, state sandbox.OpState, at time.Time, reason string) (int, error) {
	where, owner := "owner != ?", owners.IsNot
	if owners.Is != "" {
		where, owner = "owner = ?", owners.Is
	}
	var n int64
	err := s.b.Write(ctx, func(q Querier) error {
		res, err := q.Exec(ctx, `UPDATE operations SET state=?, finished_at=?,
			error = CASE WHEN error = '' THEN ? ELSE error || '; ' || ? END
			WHERE state='pending' AND `+where, state, nanos(at), reason, reason, owner)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return int(n), err
}

// Identity implements store.Store.
func (s *Store) Identity(ctx context.Context) (string, error) {
	var id string
	if err := s.b.Reads().QueryRow(ctx, "SELECT id FROM identity").Scan(&id); err != nil {
		return "", fmt.Errorf("read the store's identity: %w", err)
	}
	return id, nil
}

// AddGatewayEvent implements store.Store.
func (s *Store) AddGatewayEvent(ctx context.Context, ev store.GatewayEvent) error {
	return s.b.Write(ctx, func(q Querier) error {
		_, err := q.Exec(ctx, `INSERT INTO gateway_events (at, kind, subject, detail) VALUES (?,?,?,?)`,
			nanos(ev.At), ev.Kind, ev.Subject, ev.Detail)
		return err
	})
}

// ListGatewayEvents implements store.Store.
func (s *Store) ListGatewayEvents(ctx context.Context) ([]store.GatewayEvent, error) {
	rows, err := s.b.Reads().Query(ctx, `SELECT at, kind, subject, detail FROM gateway_events ORDER BY id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var list []store.GatewayEvent
	for rows.Next() {
		var ev store.GatewayEvent
		var at int64
		if err := rows.Scan(&at, &ev.Kind, &ev.Subject, &ev.Detail); err != nil {
			return nil, err
		}
		ev.At = fromNanos(at)
		list = append(list, ev)
	}
	return list, rows.Err()
}
