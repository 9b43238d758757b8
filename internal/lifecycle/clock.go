package lifecycle

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/corral-sandbox/corral/internal/policy"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

// clockTick is how often the clock looks at the sandboxes with a
// lifecycle's idle_timeout or max_lifetime.
const clockTick = time.Second

// clock carries out the policies' lifecycle.idle_timeout and max_lifetime.
// It learns each sandbox's rules and state from its record whenever the
// sandbox's actor steps it (at recovery too), so an expiry, computed from
// the record's creation time, holds across restarts; idleness is counted
// from the sandbox's last activity in this gateway (an exec, a file
// operation, a connection to one of its ports, an API call naming it), or
// from the gateway's start.
type clock struct {
	mu      sync.Mutex
	started time.Time
	watched map[string]watched // the sandboxes with rules, by id
	active  map[string]time.Time

	stop, done chan struct{}
}

// watched is what the clock knows of one sandbox, as of its last step.
type watched struct {
	rules   policy.Lifecycle
	created time.Time
	desired sandbox.DesiredState
	phase   sandbox.Phase
}

func newClock(now time.Time) *clock {
	return &clock{started: now, watched: map[string]watched{}, active: map[string]time.Time{}}
}

// note learns a sandbox's rules and state from its record.
func (c *clock) note(sb *sandbox.Sandbox) {
	var rules policy.Lifecycle
	if strings.Contains(sb.Spec.Policy, "lifecycle") { // the parse is for the few that have one
		if pol, err := policy.Parse(sb.Spec.Policy); err == nil {
			rules = pol.Lifecycle
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if rules.IdleTimeout == 0 && rules.MaxLifetime == 0 {
		delete(c.watched, sb.ID)
		return
	}
	c.watched[sb.ID] = watched{rules: rules, created: sb.CreatedAt, desired: sb.Desired, phase: sb.Phase}
}

// forget drops a removed sandbox.
func (c *clock) forget(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.watched, id)
	delete(c.active, id)
}

// touch notes activity on a sandbox.
func (c *clock) touch(id string, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.watched[id]; ok {
		c.active[id] = now
	}
}

// due is what the rules ask of each watched sandbox at now: its id, the
// action (policy.OnPause, OnStop, OnDelete) and why.
type due struct{ id, action, why string }

func (c *clock) due(now time.Time) []due {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []due
	for id, w := range c.watched {
		l := w.rules
		if l.MaxLifetime > 0 && !now.Before(w.created.Add(l.MaxLifetime)) && w.desired != sandbox.DesiredDeleted &&
			!(l.OnExpiry == policy.OnStop && w.desired == sandbox.DesiredStopped) {
			out = append(out, due{id, l.OnExpiry, fmt.Sprintf("its max_lifetime (%s) passed", l.MaxLifetime)})
			continue
		}
		last := c.active[id]
		if last.IsZero() {
			last = c.started
			if w.created.After(last) {
				last = w.created
			}
		}
		if l.IdleTimeout > 0 && w.desired == sandbox.DesiredRunning && w.phase == sandbox.PhaseReady && !now.Before(last.Add(l.IdleTimeout)) {
			out = append(out, due{id, l.OnIdle, fmt.Sprintf("idle for %s (its idle_timeout)", now.Sub(last).Round(time.Second))})
		}
	}
	return out
}

// runClock starts the clock's loop; endClock ends it.
func (m *Manager) runClock() {
	c := m.clock
	c.stop, c.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(c.done)
		t := time.NewTicker(clockTick)
		defer t.Stop()
		for {
			select {
			case <-c.stop:
				return
			case <-t.C:
			}
			for _, d := range c.due(m.now()) {
				m.lifecycleAct(d)
			}
		}
	}()
}

func (m *Manager) endClock() {
	if c := m.clock; c.stop != nil {
		close(c.stop)
		<-c.done
		c.stop = nil
	}
}

// lifecycleAct does what a lifecycle rule asks, as the gateway's own
// request, its journal entry saying why.
func (m *Manager) lifecycleAct(d due) {
	ctx, cancel := storeCtx()
	defer cancel()
	detail := "lifecycle: " + d.why
	var (
		sb  *sandbox.Sandbox
		err error
	)
	switch d.action {
	case policy.OnPause:
		sb, err = m.changeIntent(ctx, d.id, sandbox.OpPause, detail, func(sb *sandbox.Sandbox) error { return pauseIntent(sb, false) })
	case policy.OnStop:
		sb, err = m.changeIntent(ctx, d.id, sandbox.OpStop, detail, stopIntent)
	case policy.OnDelete:
		sb, err = m.deleteWith(ctx, d.id, false, detail)
	}
	if err != nil {
		m.log.Warn("lifecycle rule", "id", d.id, "action", d.action, "why", d.why, "err", err)
		return
	}
	m.log.Info("lifecycle rule", "id", d.id, "action", d.action, "why", d.why)
	m.clock.note(sb) // the new intent: not due again
}
