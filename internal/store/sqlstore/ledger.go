package sqlstore

import (
	"context"
	"fmt"
	"net/netip"
	"strings"

	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/store"
)

// The ledgers' bounds are store.KeptUses and store.KeptDenials. The
// oldest are let go once a tenth of the bound more came (a count of the
// newest is a walk of the index that long), so a ledger holds up to 10%
// more for a while.

const (
	useColumns    = `seq, tenant, secret, credential, sandbox_id, sandbox, time, host, port, method, path, verdict, reason, status`
	denialColumns = `seq, sandbox_id, sandbox, time, host, port, addr, method, path, verdict, policy, reason`
)

// AppendLedger implements store.Store: it keeps uses and denials in one
// write, sets their Seq, and lets the oldest past the bounds go. Refused
// while the disk is full, as everything that grows the store is.
func (s *Store) AppendLedger(ctx context.Context, uses []sandbox.CredentialUse, denials []sandbox.EgressDecision) error {
	return s.b.Grow(ctx, func(q Querier) error {
		type secretKey struct{ tenant, name string }
		secrets, sandboxes := map[secretKey]int{}, map[string]int{}
		for i := range uses {
			u := &uses[i]
			err := q.QueryRow(ctx, `INSERT INTO credential_uses (`+useColumns[len("seq, "):]+`) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?) RETURNING seq`,
				u.Tenant, u.Secret, u.Credential, u.SandboxID, u.Sandbox, nanos(u.Time), u.Host, u.Port, u.Method, u.Path, u.Verdict, u.Reason, u.Status).Scan(&u.Seq)
			if err != nil {
				return err
			}
			secrets[secretKey{u.Tenant, u.Secret}]++
		}
		for i := range denials {
			d := &denials[i]
			addr := ""
			if d.Addr.IsValid() {
				addr = d.Addr.String()
			}
			err := q.QueryRow(ctx, `INSERT INTO egress_denials (`+denialColumns[len("seq, "):]+`) VALUES (?,?,?,?,?,?,?,?,?,?,?) RETURNING seq`,
				d.SandboxID, d.Sandbox, nanos(d.Time), d.Host, d.Port, addr, d.Method, d.Path, d.Verdict, d.Policy, d.Reason).Scan(&d.Seq)
			if err != nil {
				return err
			}
			sandboxes[d.SandboxID]++
		}
		for k, n := range secrets {
			if err := s.trim(ctx, q, "credential_uses", "tenant = ?1 AND secret = ?2", n, store.KeptUses, k.tenant, k.name); err != nil {
				return err
			}
		}
		for id, n := range sandboxes {
			if err := s.trim(ctx, q, "egress_denials", "sandbox_id = ?1", n, store.KeptDenials, id); err != nil {
				return err
			}
		}
		return nil
	})
}

// trim counts added rows of table that where selects with keys (as ?1,
// ?2) and, once a tenth of keep came since the last trim (or since the
// store was opened), keeps the newest keep. (A count of a write that
// then failed stays: it only brings the next trim closer.)
func (s *Store) trim(ctx context.Context, q Querier, table, where string, added, keep int, keys ...string) error {
	k := table + "\x00" + strings.Join(keys, "\x00")
	s.mu.Lock()
	s.appended[k] += added
	due := s.appended[k] >= keep/10
	s.mu.Unlock()
	if !due {
		return nil
	}
	args := []any{keep - 1}
	for _, key := range keys {
		args = append(args, key)
	}
	_, err := q.Exec(ctx, `DELETE FROM `+table+` WHERE `+where+` AND seq <
		(SELECT seq FROM `+table+` WHERE `+where+` ORDER BY seq DESC LIMIT 1 OFFSET ?`+fmt.Sprint(len(args))+`)`,
		append(args[1:], args[0])...)
	if err == nil {
		s.mu.Lock()
		delete(s.appended, k)
		s.mu.Unlock()
	}
	return err
}

// CredentialUses implements store.Store: the newest limit uses of secret
// after seq after, oldest first.
func (s *Store) CredentialUses(ctx context.Context, tenant, secret string, after int64, limit int) ([]sandbox.CredentialUse, error) {
	rows, err := s.b.Reads().Query(ctx, `SELECT * FROM (SELECT `+useColumns+` FROM credential_uses WHERE tenant = ? AND secret = ? AND seq > ?
		ORDER BY seq DESC LIMIT ?) AS newest ORDER BY seq`, tenant, secret, after, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []sandbox.CredentialUse
	for rows.Next() {
		var u sandbox.CredentialUse
		var at int64
		if err := rows.Scan(&u.Seq, &u.Tenant, &u.Secret, &u.Credential, &u.SandboxID, &u.Sandbox, &at, &u.Host, &u.Port, &u.Method, &u.Path,
			&u.Verdict, &u.Reason, &u.Status); err != nil {
			return nil, err
		}
		u.Time = fromNanos(at)
		out = append(out, u)
	}
	return out, rows.Err()
}

// EgressDenials implements store.Store: the newest limit denials of
// sandbox id after seq after, oldest first.
func (s *Store) EgressDenials(ctx context.Context, id string, after int64, limit int) ([]sandbox.EgressDecision, error) {
	rows, err := s.b.Reads().Query(ctx, `SELECT * FROM (SELECT `+denialColumns+` FROM egress_denials WHERE sandbox_id = ? AND seq > ?
		ORDER BY seq DESC LIMIT ?) AS newest ORDER BY seq`, id, after, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []sandbox.EgressDecision
	for rows.Next() {
		var d sandbox.EgressDecision
		var at int64
		var addr string
		if err := rows.Scan(&d.Seq, &d.SandboxID, &d.Sandbox, &at, &d.Host, &d.Port, &addr, &d.Method, &d.Path, &d.Verdict, &d.Policy, &d.Reason); err != nil {
			return nil, err
		}
		d.Time = fromNanos(at)
		d.Addr, _ = netip.ParseAddr(addr) // "" is no address
		out = append(out, d)
	}
	return out, rows.Err()
}
