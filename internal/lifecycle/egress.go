package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/policy"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

// Egress is the gateway's egress proxy as the lifecycle uses it: the
// driver attaches each new incarnation to it (driver.Egress); the
// reconciler attaches again what runs without it (after a gateway
// restart), tells it of changed rules and of deleted sandboxes.
type Egress interface {
	// Attached reports whether incarnation ref's proxy is served.
	Attached(ref driver.Ref) bool
	// Refresh reads sandbox id's rules and name again from its record and
	// closes the open connections the rules no longer allow.
	Refresh(id string)
	// Forget drops what the proxy keeps of a deleted sandbox.
	Forget(id string)
	// InForce describes the rules the proxy enforces for sandbox id.
	InForce(ctx context.Context, id string) string
}

// Ledger keeps the egress proxy's refused and audited decisions
// (internal/ledger).
type Ledger interface {
	// Denials returns those kept of sandbox id, oldest first, and with
	// follow a channel of those to come and its stop.
	Denials(ctx context.Context, id string, follow bool) ([]sandbox.EgressDecision, <-chan sandbox.EgressDecision, func(), error)
	// SandboxGone ends the following of a deleted sandbox's decisions
	// (the store drops them with its record).
	SandboxGone(id string)
}

// Network describes the egress rules in force for a sandbox ("" when the
// gateway has no egress proxy).
func (m *Manager) Network(ctx context.Context, sb *sandbox.Sandbox) string {
	if m.cfg.Egress == nil {
		return ""
	}
	return m.cfg.Egress.InForce(ctx, sb.ID)
}

// Denials returns the egress proxy's refused and audited decisions of a
// sandbox, oldest first, and with follow a channel of those to come (see
// Egress.Denials).
func (m *Manager) Denials(ctx context.Context, nameOrID string, follow bool) ([]sandbox.EgressDecision, <-chan sandbox.EgressDecision, func(), error) {
	sb, err := m.Get(ctx, nameOrID)
	if err != nil {
		return nil, nil, nil, err
	}
	if m.cfg.Egress == nil || m.cfg.Ledger == nil {
		return nil, nil, nil, errdefs.FailedPrecondition("this gateway has no egress proxy: %s", m.cfg.NoEgress)
	}
	return m.cfg.Ledger.Denials(ctx, sb.ID, follow)
}

// ensureEgress serves the proxy of a running incarnation that has none
// (its gateway was restarted since it started).
func (m *Manager) ensureEgress(sb *sandbox.Sandbox) error {
	ref := driver.Ref{ID: sb.ID, Generation: sb.Generation}
	if m.cfg.Egress == nil || m.cfg.Egress.Attached(ref) {
		return nil
	}
	a, ok := m.cfg.Driver.(driver.EgressAttacher)
	if !ok {
		return errdefs.NotImplemented("the %s driver cannot serve an egress proxy to a running sandbox", m.cfg.Driver.Name())
	}
	ctx, cancel := context.WithTimeout(m.callCtx, m.cfg.CallTimeout)
	defer cancel()
	err := a.AttachEgress(ctx, ref)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil // it stopped meanwhile: the next step sees that
	}
	if err != nil {
		return fmt.Errorf("serve the egress proxy again: %w", err)
	}
	m.log.Info("egress proxy served again", "sandbox", sb.Name, "generation", sb.Generation)
	return nil
}

// checkNetworkChange tells whether a running sandbox may take the policy
// next: only its network_policies may differ from those it runs under.
func (m *Manager) checkNetworkChange(sb *sandbox.Sandbox, next string) error {
	cur, err := policy.Parse(sb.Spec.Policy)
	if err != nil {
		return err
	}
	nxt, err := policy.Parse(next)
	if err != nil {
		return errdefs.InvalidArgument("sandbox %q: %v", sb.Name, err)
	}
	cur.Network, nxt.Network = nil, nil
	cur.Credentials, nxt.Credentials = nil, nil
	if !reflect.DeepEqual(cur, nxt) {
		return errdefs.FailedPrecondition("sandbox %q is %s: only network_policies and credentials can change while it runs (files, process and limits stay for an incarnation); stop it first to change the rest", sb.Name, sb.Phase)
	}
	if m.cfg.Egress == nil {
		return errdefs.FailedPrecondition("this gateway has no egress proxy (its driver cannot serve one): network_policies and credentials cannot change")
	}
	return nil
}
