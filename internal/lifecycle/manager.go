// Package lifecycle turns requests into intent and converges compute to it.
// Requests change a record's desired state and write a journal entry in one
// transaction, then wake the sandbox's actor; the actor (one goroutine per
// sandbox at a time) observes the driver and takes the next idempotent step,
// journaling every driver call before it is made and settling it after.
package lifecycle

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/corral-sandbox/corral/internal/caller"
	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/metrics"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/store"
)

// Config is what a Manager needs.
type Config struct {
	Store  store.Store
	Driver driver.Driver
	// Instance identifies this gateway process in the journal.
	Instance string
	// Epoch is the store's lease's, put on every journal entry this
	// gateway writes (0 on a store without replicas).
	Epoch int64
	// Gateway is this gateway's identity (its store's), which the driver
	// puts on its objects: an object of another gateway is never
	// collected as an orphan.
	Gateway string
	Logger  *slog.Logger

	// ProvisioningTimeout bounds reaching running (create or start).
	ProvisioningTimeout time.Duration
	// StopTimeout is the main process's grace between SIGTERM and SIGKILL.
	StopTimeout time.Duration
	// DeleteTimeout bounds reaching deleted.
	DeleteTimeout time.Duration
	// CallTimeout bounds one driver call (create and start get
	// ProvisioningTimeout when that is shorter; stop gets StopTimeout more).
	CallTimeout time.Duration
	// RetryBase and RetryMax bound the exponential backoff between attempts.
	RetryBase, RetryMax time.Duration
	// RestartBase is the first wait before a restart by the restart
	// policy; it doubles with every restart, up to a minute.
	RestartBase time.Duration
	// DefaultImage is used when a create names no image.
	DefaultImage string
	// OrphanGrace is how long a compute object without a record is kept
	// before CollectOrphans removes it.
	OrphanGrace time.Duration
	// Egress, when set, is the proxy the driver attaches sandboxes to; nil:
	// sandboxes have no way out, and network_policies are refused.
	Egress Egress
	// NoEgress says why Egress is nil, for the error that refuses
	// network_policies.
	NoEgress string
	// Ledger keeps the egress proxy's denials (with Egress).
	Ledger Ledger
	// SecretExists, when set, says whether a tenant's secret that a
	// policy binds exists (errdefs.ErrNotFound when not).
	SecretExists func(ctx context.Context, tenant, name string) error
	// Exposed, when set, serves the sandboxes' exposed ports: it is told
	// when a sandbox's record goes, and closed at the shutdown.
	Exposed Exposer
	// Failures are the failures a test build re-introduces (none
	// elsewhere).
	Failures Failures
	// Seeds, when set, gives the files of a snapshot's manifest, as a tar
	// stream, to the sandboxes created from it.
	Seeds Seeds
}

// Seeds gives snapshots' files (internal/snapshots).
type Seeds interface {
	// WriteTar writes the files of a manifest as a tar stream.
	WriteTar(ctx context.Context, manifest string, w io.Writer) error
	// OpenBlob opens a memory image.
	OpenBlob(digest string) (io.ReadCloser, error)
}

// Exposer serves sandboxes' exposed ports (internal/exposed).
type Exposer interface {
	// Forget stops serving the ports of sandbox id, whose record goes.
	Forget(id string)
	// Close stops serving every port, at the gateway's shutdown.
	Close()
}

// forgetExposed stops serving the exposed ports of sandbox id.
func (m *Manager) forgetExposed(id string) {
	if m.cfg.Exposed != nil {
		m.cfg.Exposed.Forget(id)
	}
}

func (c *Config) setDefaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.ProvisioningTimeout, 5*time.Minute)
	def(&c.StopTimeout, 10*time.Second)
	def(&c.DeleteTimeout, 2*time.Minute)
	def(&c.CallTimeout, time.Minute)
	def(&c.RetryBase, 200*time.Millisecond)
	def(&c.RetryMax, 30*time.Second)
	def(&c.RestartBase, time.Second)
	def(&c.OrphanGrace, 5*time.Minute)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Manager owns the lifecycle of every sandbox of one gateway.
type Manager struct {
	cfg    Config
	log    *slog.Logger
	events broadcaster

	// callCtx is the parent of every driver call; it is cancelled only
	// when the shutdown budget runs out.
	callCtx    context.Context
	cancelCall context.CancelFunc

	// watching ends the driver event watch at shutdown.
	stopWatch context.CancelFunc
	watchDone chan struct{}

	pools *Pools
	clock *clock // the policies' idle_timeout and max_lifetime

	mu       sync.Mutex
	orphans  map[string]time.Time // sandbox id -> when first seen without a record
	foreign  map[string]bool      // other gateways whose objects were reported
	actors   map[string]*actor
	closing  bool
	wg       sync.WaitGroup // one count per running actor goroutine
	requests sync.WaitGroup // one count per admitted request
}

// New returns a Manager; call Recover before serving requests.
func New(cfg Config) *Manager {
	cfg.setDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	m := &Manager{cfg: cfg, log: cfg.Logger, callCtx: ctx, cancelCall: cancel,
		actors: map[string]*actor{}, orphans: map[string]time.Time{}}
	m.pools = &Pools{m: m, wake: make(chan struct{}, 1)}
	m.clock = newClock(m.now())
	return m
}

// storeCtx is the context of store writes: they must land even while the
// gateway shuts down, so they are bounded but never cancelled by it.
func storeCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 30*time.Second)
}

func (m *Manager) now() time.Time { return time.Now().UTC() }

// deadlineFor is how long a sandbox may take to reach a desired state.
func (m *Manager) deadlineFor(d sandbox.DesiredState) time.Duration {
	switch d {
	case sandbox.DesiredStopped:
		return m.cfg.StopTimeout + m.cfg.CallTimeout
	case sandbox.DesiredDeleted:
		return m.cfg.DeleteTimeout
	}
	return m.cfg.ProvisioningTimeout
}

// recoveryConcurrency bounds the sandboxes whose first step after a
// restart runs at once.
const recoveryConcurrency = 64

// Recover settles what dead instances left pending as interrupted, gives
// unfinished intents a fresh deadline and wakes every sandbox's actor,
// returning once the last one is woken.
func (m *Manager) Recover(ctx context.Context) error {
	now := m.now()
	n, err := 0, error(nil)
	if !m.cfg.Failures.RetainedClaim {
		n, err = m.cfg.Store.SettlePending(ctx, store.Owners{IsNot: m.cfg.Instance}, sandbox.OpInterrupted, now,
			"interrupted: the gateway instance that owned it ended before it finished")
	}
	if err != nil {
		return err
	}
	if n > 0 {
		metrics.Interrupted(n)
		m.log.Info("settled operations of earlier gateway instances as interrupted", "count", n)
	}
	list, err := m.cfg.Store.ListSandboxes(ctx, "")
	if err != nil {
		return err
	}
	left := atomic.Int64{}
	left.Store(int64(len(list)))
	observed := func() {
		if left.Add(-1) == 0 {
			took := m.now().Sub(now)
			metrics.Recovered(took)
			m.log.Info("every sandbox compared with the driver after recovery", "sandboxes", len(list), "took", took)
		}
	}
	// At most recoveryConcurrency first steps at a time: thousands of
	// actors queued on the store at once cost a stack each.
	slots := make(chan struct{}, recoveryConcurrency)
	for _, sb := range list {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		if !sb.Converged() {
			_, err := m.mutate(sb.ID, func(sb *sandbox.Sandbox) (store.Mutation, error) {
				sb.Deadline = later(sb.Deadline, now.Add(m.deadlineFor(sb.Desired)))
				return store.Mutation{}, nil
			})
			if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
				return err
			}
		}
		release := func() { <-slots }
		if !m.kickObserved(sb.ID, func() { release(); observed() }) {
			release() // closing: the actor will not step
		}
	}
	m.log.Info("recovery done; reconciling", "sandboxes", len(list))
	m.pools.run()
	m.runClock()
	return nil
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// WatchDriver follows the driver's change events, when it has them, and
// wakes the actor of every sandbox that changed, reconnecting with backoff
// when the event source fails. Shutdown ends it.
func (m *Manager) WatchDriver() {
	w, ok := m.cfg.Driver.(driver.Watcher)
	if !ok {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	m.stopWatch, m.watchDone = cancel, make(chan struct{})
	go func() {
		defer close(m.watchDone)
		for n := 1; ; n++ {
			err := w.Watch(ctx, func(id string) {
				m.log.Debug("driver event", "id", id)
				m.nudge(id)
			})
			if ctx.Err() != nil {
				return
			}
			wait := m.backoff(n)
			m.log.Warn("driver event watch ended; retrying", "err", err, "retry_in", wait)
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			// events may have been missed meanwhile
			if err := m.Resync(ctx); err != nil && ctx.Err() == nil {
				m.log.Error("resync", "err", err)
			}
		}
	}()
}

// Resync wakes every sandbox's actor, so drift in the driver is noticed.
func (m *Manager) Resync(ctx context.Context) error {
	list, err := m.cfg.Store.ListSandboxes(ctx, "")
	if err != nil {
		return err
	}
	for _, sb := range list {
		m.nudge(sb.ID)
	}
	return nil
}

// Shutdown stops starting new driver calls and waits for the ones in flight,
// whoever asked for them, until ctx ends; then it cancels what is left,
// waits up to grace for those calls to return, and settles every entry this
// instance still has pending as interrupted.
func (m *Manager) Shutdown(ctx context.Context, grace time.Duration) error {
	if m.stopWatch != nil {
		m.stopWatch()
		<-m.watchDone
	}
	m.pools.end()
	m.endClock()
	m.mu.Lock()
	m.closing = true
	for _, a := range m.actors {
		if a.retry != nil {
			a.retry.Stop()
		}
	}
	m.mu.Unlock()
	if m.cfg.Exposed != nil {
		m.cfg.Exposed.Close()
	}
	if m.cfg.Failures.UnawaitedWorker {
		return nil // the calls in flight die with the process, unsettled
	}

	idle := make(chan struct{})
	go func() { m.wg.Wait(); close(idle) }()
	select {
	case <-idle:
	case <-ctx.Done():
		m.log.Warn("shutdown budget spent; cancelling driver calls still in flight")
		m.cancelCall()
		select {
		case <-idle:
		case <-time.After(grace):
			m.log.Error("driver calls did not return after cancellation; settling them as interrupted")
		}
	}
	m.cancelCall()
	m.requests.Wait() // store-only and short: their entries must precede the settling
	m.events.closeAll()
	sctx, cancel := storeCtx()
	defer cancel()
	n, err := m.cfg.Store.SettlePending(sctx, store.Owners{Is: m.cfg.Instance}, sandbox.OpInterrupted, m.now(),
		"interrupted: the gateway shut down before it finished")
	if err == nil && !m.cfg.Failures.RetainedClaim {
		// A shutdown during recovery may come before the entries of dead
		// instances were settled; with the home lock held, every other
		// owner is dead, so settle them too.
		var more int
		more, err = m.cfg.Store.SettlePending(sctx, store.Owners{IsNot: m.cfg.Instance}, sandbox.OpInterrupted, m.now(),
			"interrupted: the gateway instance that owned it ended before it finished")
		n += more
	}
	if n > 0 {
		metrics.Interrupted(n)
		m.log.Info("settled pending operations as interrupted", "count", n)
	}
	return err
}

// Watch subscribes the caller of ctx to record changes. The channel closes when cancel is called, the watcher falls
// behind, or the gateway shuts down. A caller that holds too many watches,
// or a gateway that does, is errdefs.ErrResourceExhausted.
func (m *Manager) Watch(ctx context.Context) (<-chan Event, func(), error) {
	return m.events.subscribe(caller.From(ctx).Name)
}

// WatchSandboxes is what a front end streams to a client: every sandbox
// of the caller's tenant that name selects (its name or id; "" selects
// all) as EventAdded, then
// EventSynced, then each change of those, until ctx ends (the channel
// closes) or the watch does (the channel closes first: the caller fell
// behind, or the gateway is shutting down). No change between the list
// and the stream is missed: the watch begins before the list.
func (m *Manager) WatchSandboxes(ctx context.Context, name string) (<-chan Event, error) {
	live, cancel, err := m.Watch(ctx)
	if err != nil {
		return nil, err
	}
	list, err := m.selected(ctx, name)
	if err != nil {
		cancel()
		return nil, err
	}
	who := caller.From(ctx)
	selects := func(sb *sandbox.Sandbox) bool {
		return who.Sees(sb.Tenant) && (name == "" || name == sb.Name || name == sb.ID)
	}
	out := make(chan Event)
	go func() {
		defer close(out)
		defer cancel()
		send := func(ev Event) bool {
			select {
			case out <- ev:
				return true
			case <-ctx.Done():
				return false
			}
		}
		for _, sb := range list {
			if selects(sb) && !send(Event{Type: EventAdded, Sandbox: sb}) {
				return
			}
		}
		if !send(Event{Type: EventSynced}) {
			return
		}
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-live:
				if !ok {
					return
				}
				if selects(ev.Sandbox) && !send(ev) {
					return
				}
			}
		}
	}()
	return out, nil
}

// mutate runs a store mutation and publishes the result.
func (m *Manager) mutate(id string, fn func(sb *sandbox.Sandbox) (store.Mutation, error)) (*sandbox.Sandbox, error) {
	return m.mutateWith(m.cfg.Store.Mutate, id, fn)
}

// mutator is a store's Mutate or MutateNamed.
type mutator func(ctx context.Context, key string, fn func(sb *sandbox.Sandbox) (store.Mutation, error)) (*sandbox.Sandbox, error)

// mutateWith is mutate through the given store method.
func (m *Manager) mutateWith(mutate mutator, key string, fn func(sb *sandbox.Sandbox) (store.Mutation, error)) (*sandbox.Sandbox, error) {
	ctx, cancel := storeCtx()
	defer cancel()
	sb, err := mutate(ctx, key, func(sb *sandbox.Sandbox) (store.Mutation, error) {
		mu, err := fn(sb)
		sb.UpdatedAt = m.now()
		return mu, err
	})
	if err != nil {
		return nil, err
	}
	m.events.publish(Event{Type: EventModified, Sandbox: sb})
	return sb, nil
}

// selected is the sandbox name names (none when there is no such
// sandbox), or every sandbox for "".
func (m *Manager) selected(ctx context.Context, name string) ([]*sandbox.Sandbox, error) {
	if name == "" {
		return m.List(ctx)
	}
	sb, err := m.Get(ctx, name)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return []*sandbox.Sandbox{sb}, nil
}
