package lifecycle

import (
	"context"
	"time"

	"github.com/corral-sandbox/corral/internal/sandbox"
)

// actor serializes all work on one sandbox: at most one goroutine runs
// reconcile steps for it at a time. Its fields are guarded by Manager.mu.
type actor struct {
	id      string
	wake    chan struct{} // capacity 1: a pending wake-up
	running bool          // a goroutine is working on this sandbox
	retry   *time.Timer   // a scheduled retry, if any
	urgent  bool          // kicked, not only nudged, since its step began
	gone    bool          // the record no longer exists

	// inFlight cancels the driver call in progress, if any.
	inFlight     context.CancelFunc
	inFlightKind sandbox.OpKind
	preempted    bool // the call in flight was cancelled by a delete
	force        bool // delete without a graceful stop

	failures int // consecutive failed attempts, for backoff

	// settled are the entries of driver calls that returned, settled but
	// not written yet: the actor's next write carries them (the next
	// call's pending entry, the phase it reached), and it writes them
	// alone before it stops working on the sandbox. Only the actor's
	// goroutine touches them.
	settled []*sandbox.Operation

	// restartDue is when generation restartGen is restarted by the
	// restart policy.
	restartGen int64
	restartDue time.Time
	// observed, when set, is called once after the next step: recovery
	// counts the sandboxes it has compared with the driver.
	observed func()
}

// kick wakes the actor of a sandbox, starting its goroutine if needed: a
// changed intent, which cancels a scheduled retry and acts at once.
func (m *Manager) kick(id string) { m.wakeActor(id, nil, true) }

// nudge wakes the actor of a sandbox unless a retry is scheduled: a driver
// event, a resync or a request that changed nothing. The retry observes
// the driver anyway, and a failure that recurs on every observation (a
// start that fails at once and makes an event each time) never runs
// faster than its backoff.
func (m *Manager) nudge(id string) { m.wakeActor(id, nil, false) }

// kickObserved is kick that has observed called after the actor's next
// step. It reports false, calling nothing, when the manager is closing.
func (m *Manager) kickObserved(id string, observed func()) bool {
	return m.wakeActor(id, observed, true)
}

// wakeActor wakes the actor of id, cancelling a scheduled retry when
// now is set and leaving the actor to it otherwise. It reports false,
// calling nothing, when the manager is closing.
func (m *Manager) wakeActor(id string, observed func(), now bool) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closing {
		return false
	}
	a := m.actors[id]
	if a == nil {
		a = &actor{id: id, wake: make(chan struct{}, 1)}
		m.actors[id] = a
	}
	if observed != nil {
		a.observed = observed
	}
	if a.retry != nil {
		if !now {
			return true
		}
		a.retry.Stop()
		a.retry = nil
	}
	a.urgent = a.urgent || now
	select {
	case a.wake <- struct{}{}:
	default:
	}
	if !a.running {
		a.running = true
		m.wg.Add(1)
		go m.run(a)
	}
	return true
}

// run works on a sandbox until it has converged or must wait for a retry.
func (m *Manager) run(a *actor) {
	defer m.wg.Done()
	for {
		m.mu.Lock()
		woken := false
		select {
		case <-a.wake:
			woken = true
		default:
		}
		if !woken || m.closing {
			a.running = false
			if a.gone && a.retry == nil {
				delete(m.actors, a.id)
			}
			settled := a.settled // left by a step cut short by the shutdown
			a.settled = nil
			m.mu.Unlock()
			m.writeSettled(a.id, settled)
			return
		}
		a.urgent = false
		m.mu.Unlock()

		again, retryIn := m.step(a)
		if !again {
			m.writeSettled(a.id, a.settled)
			a.settled = nil
		}
		m.mu.Lock()
		if f := a.observed; f != nil {
			a.observed = nil
			f()
		}
		switch {
		case again:
			select {
			case a.wake <- struct{}{}:
			default:
			}
		case retryIn > 0 && !m.closing:
			if a.retry != nil {
				a.retry.Stop()
			}
			id := a.id
			a.retry = time.AfterFunc(retryIn, func() { m.kick(id) })
			if !a.urgent { // only nudged meanwhile (the failure's own event, say): wait for the retry
				select {
				case <-a.wake:
				default:
				}
			}
		}
		m.mu.Unlock()
	}
}

// preempt cancels the driver call in flight for a sandbox that is to be
// deleted, so that delete never waits for a create or start that hangs.
func (m *Manager) preempt(id string, force bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	a := m.actors[id]
	if a == nil {
		return
	}
	a.force = a.force || force
	if a.inFlight != nil && a.inFlightKind != sandbox.OpDriverDelete {
		a.preempted = true
		a.force = true // the graceful path was cut short: remove at once
		a.inFlight()
	}
}

// backoff is the wait before the next attempt after n consecutive failures.
func (m *Manager) backoff(n int) time.Duration {
	d := m.cfg.RetryBase
	for i := 1; i < n && d < m.cfg.RetryMax; i++ {
		d *= 2
	}
	return min(d, m.cfg.RetryMax)
}
