package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"github.com/corral-sandbox/corral/internal/metrics"
	"time"

	"github.com/corral-sandbox/corral/internal/caller"
	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/policy"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/store"
)

// Finding is one inconsistency the doctor found.
type Finding struct {
	Sandbox, Problem, Action string
}

// Doctor compares records, journal and driver, and says what is wrong and
// what is done about it. It changes nothing.
func (m *Manager) Doctor(ctx context.Context) ([]Finding, error) {
	var out []Finding
	lctx, cancel := context.WithTimeout(ctx, m.cfg.CallTimeout)
	objs, listErr := m.cfg.Driver.List(lctx)
	cancel()
	if listErr != nil {
		out = append(out, Finding{"-", fmt.Sprintf("the %s driver does not answer: %v", m.cfg.Driver.Name(), listErr),
			"sandboxes wait for it with backoff; nothing is lost meanwhile"})
	}
	var left []driver.Object
	if listErr == nil {
		var err error
		if left, err = m.leftovers(ctx, objs); err != nil {
			out = append(out, Finding{"-", fmt.Sprintf("the %s driver cannot list storage left without compute: %v", m.cfg.Driver.Name(), err),
				"such storage is checked again at the next orphan collection"})
		}
	}
	records, err := m.cfg.Store.ListSandboxes(ctx, "")
	if err != nil {
		return nil, err
	}
	byID := map[string]driver.Object{}
	for _, o := range objs {
		byID[o.ID] = o
	}
	now := m.now()
	known := map[string]bool{}
	for _, sb := range records {
		known[sb.ID] = true
		o, found := byID[sb.ID]
		delete(byID, sb.ID)
		switch {
		case sb.Phase == sandbox.PhaseError:
			out = append(out, Finding{sb.Name, "not " + string(sb.Desired) + " by its deadline: " + sb.Reason,
				"the reconciler keeps trying with backoff; stop, start or delete it to change the intent"})
		case sb.Desired == sandbox.DesiredDeleted && now.After(sb.Deadline):
			out = append(out, Finding{sb.Name, "deleting for longer than its deadline: " + sb.Reason,
				"retried with backoff; if its compute is really gone: corral sandbox delete --force --assume-gone " + sb.Name})
		case listErr == nil && sb.Phase == sandbox.PhaseReady && (!found || o.State != driver.StateRunning):
			out = append(out, Finding{sb.Name, "recorded ready, but the driver shows no running compute",
				"the next reconcile (at most a resync interval away) starts it again"})
		case listErr == nil && sb.Phase == sandbox.PhaseStopped && found && o.State == driver.StateRunning:
			out = append(out, Finding{sb.Name, "recorded stopped, but its compute runs",
				"the next reconcile stops it"})
		}
		ops, err := m.cfg.Store.ListOperations(ctx, sb.ID)
		if err != nil {
			return nil, err
		}
		for _, op := range ops {
			if op.State == sandbox.OpPending && now.After(op.Deadline) {
				out = append(out, Finding{sb.Name, fmt.Sprintf("journal entry %d (%s) pending past its deadline %s", op.ID, op.Kind, op.Deadline.Format(time.RFC3339)),
					"settled as interrupted when its owner's gateway instance is gone; it blocks nothing"})
			}
		}
	}
	for id, o := range byID {
		if owner, foreign := driver.OwnerOf(o.Labels, m.cfg.Gateway); foreign {
			out = append(out, Finding{id, fmt.Sprintf("compute object (%q, generation %d, %s) of another gateway (%s) under this one's label",
				o.Labels[driver.LabelName], o.Generation, o.State, owner),
				"left alone: that gateway owns it; give each gateway a sandbox_label of its own"})
			continue
		}
		out = append(out, Finding{id, fmt.Sprintf("compute object (%q, generation %d, %s) without a record", o.Labels[driver.LabelName], o.Generation, o.State), m.orphanAction(id)})
	}
	for _, o := range left {
		if _, foreign := driver.OwnerOf(o.Labels, m.cfg.Gateway); !known[o.ID] && !foreign {
			out = append(out, Finding{o.ID, "storage without a compute object or a record: " + o.Message, m.orphanAction(o.ID)})
		}
	}
	return out, nil
}

// orphanAction says what becomes of an orphan: when it is removed.
func (m *Manager) orphanAction(id string) string {
	m.mu.Lock()
	first, seen := m.orphans[id]
	m.mu.Unlock()
	if seen {
		return "removed at " + first.Add(m.cfg.OrphanGrace).Format(time.RFC3339) + " or soon after"
	}
	return "reported, and removed once it has had no record for " + m.cfg.OrphanGrace.String()
}

// AssumeGone removes a sandbox's record without the driver's confirmation
// that no compute object is left, for a driver that cannot answer. It is
// journaled in the gateway's journal with who asked and why; an object that
// is left becomes an orphan, removed after the grace period.
func (m *Manager) AssumeGone(ctx context.Context, nameOrID string, force bool, why string) (*sandbox.Sandbox, error) {
	who := caller.From(ctx).String()
	done, err := m.admit()
	if err != nil {
		return nil, err
	}
	defer done()
	if !force {
		return nil, errdefs.InvalidArgument("--assume-gone needs --force: it removes the record without the driver's word")
	}
	if why == "" {
		return nil, errdefs.InvalidArgument("--assume-gone needs --reason: say why the compute is known to be gone")
	}
	sb, err := m.Get(ctx, nameOrID)
	if err != nil {
		return nil, err
	}
	m.preempt(sb.ID, true)
	if err := m.cfg.Store.DeleteSandbox(ctx, sb.ID); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		return nil, err
	}
	m.forgetExposed(sb.ID)
	m.journal(store.GatewayEvent{At: m.now(), Kind: "assumed_gone", Subject: sb.ID,
		Detail: fmt.Sprintf("record of %q removed without driver confirmation by %s: %s", sb.Name, who, why)})
	m.log.Warn("record removed without driver confirmation", "sandbox", sb.Name, "by", who, "reason", why)
	m.events.publish(Event{Type: EventDeleted, Sandbox: sb})
	return sb, nil
}

// Tiers says which isolation tiers the driver can run: those of a
// driver.Tierer, else the namespaces tier only.
func (m *Manager) Tiers(ctx context.Context) []driver.Tier {
	if t, ok := m.cfg.Driver.(driver.Tierer); ok {
		ctx, cancel := context.WithTimeout(ctx, m.cfg.CallTimeout)
		defer cancel()
		return t.Tiers(ctx)
	}
	return []driver.Tier{
		{Name: policy.IsolationNamespaces, Available: true},
		{Name: policy.IsolationGVisor, Detail: "the " + m.cfg.Driver.Name() + " driver has no gVisor tier"},
	}
}

// Stats are what the gateway has done since it started (its metrics read
// back), for the doctor's report.
type Stats = metrics.Stats

// Stats reads the gateway's Stats.
func (m *Manager) Stats() (Stats, error) { return metrics.Read() }
