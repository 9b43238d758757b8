package lifecycle

import (
	"context"
	"fmt"
	"time"

	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/store"
)

// CollectOrphans compares the driver's objects with the records. An object
// that carries this gateway's label but has no record is reported (log and
// gateway journal) when first seen, and removed once it has been an orphan
// for the orphan grace period, counted from that report in the journal: a
// gateway restarted more often than the grace still collects it. The
// driver is listed before the store, so an object whose record is being
// written is never mistaken for an orphan. An object of another gateway
// (driver.OwnerOf) is left alone, and reported once.
// Storage a driver lists as Leftovers is collected the same way.
func (m *Manager) CollectOrphans(ctx context.Context) error {
	objs, err := m.listObjects(ctx)
	if err != nil {
		return err
	}
	left, err := m.leftovers(ctx, objs)
	if err != nil {
		return fmt.Errorf("list storage left without compute: %w", err)
	}
	objs = append(objs, left...)
	records, err := m.cfg.Store.ListSandboxes(ctx, "")
	if err != nil {
		return err
	}
	known := make(map[string]bool, len(records))
	for _, sb := range records {
		known[sb.ID] = true
	}
	now := m.now()
	present := map[string]bool{}
	var reported map[string]time.Time // the journal's open reports, read when first needed
	for _, o := range objs {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if known[o.ID] {
			continue
		}
		if owner, foreign := driver.OwnerOf(o.Labels, m.cfg.Gateway); foreign {
			m.reportForeign(owner)
			continue
		}
		present[o.ID] = true
		m.mu.Lock()
		first, seen := m.orphans[o.ID]
		m.mu.Unlock()
		if !seen {
			if reported == nil {
				if reported, err = m.reportedOrphans(ctx); err != nil {
					return err
				}
			}
			first, seen = reported[o.ID]
			if !seen {
				first = now
			} else if now.Sub(first) < m.cfg.OrphanGrace {
				m.log.Warn("compute object with this gateway's label has no record; it is removed when the grace period since it was first reported ends",
					"sandbox_id", o.ID, "name", o.Labels[driver.LabelName], "reported", first, "removal", first.Add(m.cfg.OrphanGrace))
			}
			m.mu.Lock()
			m.orphans[o.ID] = first
			m.mu.Unlock()
		}
		switch {
		case !seen:
			m.log.Warn("compute object with this gateway's label has no record; it is removed after the grace period",
				"sandbox_id", o.ID, "name", o.Labels[driver.LabelName], "grace", m.cfg.OrphanGrace)
			m.journal(store.GatewayEvent{At: now, Kind: "orphan_found", Subject: o.ID,
				Detail: fmt.Sprintf("object of sandbox %q, generation %d, %s; removal after %s", o.Labels[driver.LabelName], o.Generation, o.State, m.cfg.OrphanGrace)})
		case now.Sub(first) >= m.cfg.OrphanGrace:
			dctx, cancel := context.WithTimeout(ctx, m.cfg.CallTimeout)
			err := m.cfg.Driver.Delete(dctx, o.ID)
			cancel()
			if err != nil {
				m.log.Error("remove orphaned compute object", "sandbox_id", o.ID, "err", err)
				continue
			}
			m.log.Warn("removed orphaned compute object", "sandbox_id", o.ID)
			m.journal(store.GatewayEvent{At: m.now(), Kind: "orphan_removed", Subject: o.ID,
				Detail: fmt.Sprintf("no record for %s", now.Sub(first).Round(1e6))})
			m.mu.Lock()
			delete(m.orphans, o.ID)
			m.mu.Unlock()
		}
	}
	m.mu.Lock()
	for id := range m.orphans {
		if !present[id] {
			delete(m.orphans, id)
		}
	}
	m.mu.Unlock()
	return nil
}

// reportForeign logs, once per gateway, that another gateway's objects
// share this one's engine and label.
func (m *Manager) reportForeign(owner string) {
	m.mu.Lock()
	seen := m.foreign[owner]
	if m.foreign == nil {
		m.foreign = map[string]bool{}
	}
	m.foreign[owner] = true
	m.mu.Unlock()
	if !seen {
		m.log.Warn("another gateway's compute objects share this engine and label; they are left alone (give each gateway a sandbox_label of its own)",
			"other_gateway", owner, "gateway", m.cfg.Gateway)
	}
}

// ReportForeign lists the driver's objects and reports those of other
// gateways: run at start, so that a shared engine is said at once.
func (m *Manager) ReportForeign(ctx context.Context) error {
	objs, err := m.listObjects(ctx)
	if err != nil {
		return err
	}
	for _, o := range objs {
		if owner, foreign := driver.OwnerOf(o.Labels, m.cfg.Gateway); foreign {
			m.reportForeign(owner)
		}
	}
	return nil
}

// listObjects lists the driver's objects within a call's timeout.
func (m *Manager) listObjects(ctx context.Context) ([]driver.Object, error) {
	ctx, cancel := context.WithTimeout(ctx, m.cfg.CallTimeout)
	defer cancel()
	objs, err := m.cfg.Driver.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("list driver objects: %w", err)
	}
	return objs, nil
}

// reportedOrphans are the sandbox ids the gateway journal reports as
// orphans (by any instance) and not as removed since, with when the first
// report of each was made.
func (m *Manager) reportedOrphans(ctx context.Context) (map[string]time.Time, error) {
	evs, err := m.cfg.Store.ListGatewayEvents(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the gateway journal: %w", err)
	}
	open := map[string]time.Time{}
	for _, ev := range evs {
		switch ev.Kind {
		case "orphan_found":
			if _, ok := open[ev.Subject]; !ok {
				open[ev.Subject] = ev.At
			}
		case "orphan_removed":
			delete(open, ev.Subject)
		}
	}
	return open, nil
}

// leftovers is what a driver.Leftovers driver keeps without an object of
// compute (nothing for another driver).
func (m *Manager) leftovers(ctx context.Context, compute []driver.Object) ([]driver.Object, error) {
	l, ok := m.cfg.Driver.(driver.Leftovers)
	if !ok {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, m.cfg.CallTimeout)
	defer cancel()
	return l.Leftovers(ctx, compute)
}

func (m *Manager) journal(ev store.GatewayEvent) {
	sctx, cancel := storeCtx()
	defer cancel()
	if err := m.cfg.Store.AddGatewayEvent(sctx, ev); err != nil {
		m.log.Error("write gateway journal", "kind", ev.Kind, "err", err)
	}
}
