package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/corral-sandbox/corral/internal/caller"
	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/store"
)

// KeepAlive is the main command of pool members whose pool names none: it
// keeps them running (and works on busybox) until they are claimed.
var KeepAlive = []string{"sleep", "2147483647"}

// poolResync is how often the pool loop looks again without being woken,
// so a member lost some other way is still replaced.
const poolResync = 5 * time.Second

// A refill yields to the claims that caused it: it starts once no claim
// has come for refillQuiet, or refillMaxDelay after it was asked for,
// whichever is first. Creating members competes with the claimed
// sandboxes' first execs for the CPUs and the engine; measured on two
// CPUs, that competition more than doubled a claim's time to interactive.
const (
	refillQuiet    = 300 * time.Millisecond
	refillMaxDelay = 2 * time.Second
)

// refillAtOnce bounds the members a refill has being made at once (phase
// provisioning or starting); the next ones are asked for as those become
// ready. A burst of claims empties a pool at once, and making all its
// members together took every CPU from the claimed sandboxes' first execs
// for seconds (100 claims on 2 CPUs).
var refillAtOnce = max(2, runtime.NumCPU()/2)

// PoolStatus is a pool with what its unclaimed members are doing.
type PoolStatus struct {
	*sandbox.Pool
	Members int // unclaimed members not being deleted
	Ready   int // of those, the ones a claim can take
}

// Claimed is the result of a create from a pool.
type Claimed struct {
	Sandbox *sandbox.Sandbox
	// Created is false when the request id matched an earlier create.
	Created bool
	// FromPool is true when a ready member was claimed; else Reason says
	// why the sandbox was created cold.
	FromPool bool
	Reason   string
}

// Pools are the warm pools of a gateway (Manager.Pools): their records,
// the claims that take their ready members, and the loop that keeps them
// full, on the core's requests.
type Pools struct {
	m *Manager
	// the loop: woken by wake, ended by closing stop
	wake       chan struct{}
	stop, done chan struct{}
	lastClaim  atomic.Int64 // unix nanoseconds of the last claim
}

// Pools are the manager's warm pools.
func (m *Manager) Pools() *Pools { return m.pools }

// CreatePool records a warm pool and wakes the loop that fills it. Its
// spec is fixed from now on: the image defaults to the gateway's, the
// command to KeepAlive.
func (ps *Pools) CreatePool(ctx context.Context, name string, size int, spec sandbox.Spec) (*PoolStatus, error) {
	m := ps.m
	done, err := m.admit()
	if err != nil {
		return nil, err
	}
	defer done()
	p := &sandbox.Pool{Name: name, Tenant: caller.From(ctx).Tenant, Size: size, CreatedAt: m.now()}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if len(spec.Labels) > 0 {
		return nil, errdefs.InvalidArgument("pool %q: members get their labels when they are claimed, not from the pool", name)
	}
	if spec.Image == "" {
		spec.Image = m.cfg.DefaultImage
	}
	if len(spec.Command) == 0 {
		spec.Command = KeepAlive
	}
	if err := spec.ValidateRestart(); err != nil {
		return nil, err
	}
	if err := validateInput(name, "", spec); err != nil {
		return nil, err
	}
	pol, err := m.validate(name, spec.Image, spec.Command, spec.Policy)
	if err != nil {
		return nil, err
	}
	if err := m.checkSecrets(ctx, p.Tenant, name, pol); err != nil {
		return nil, err
	}
	p.Spec = spec
	if err := m.cfg.Store.CreatePool(ctx, p); err != nil {
		return nil, err
	}
	m.log.Info("pool created", "pool", name, "tenant", p.Tenant, "size", size)
	ps.kick()
	return &PoolStatus{Pool: p}, nil
}

// ListPools returns the pools the caller of ctx sees with their members'
// counts.
func (ps *Pools) ListPools(ctx context.Context) ([]*PoolStatus, error) {
	m := ps.m
	pools, err := m.cfg.Store.ListPools(ctx, scope(ctx))
	if err != nil {
		return nil, err
	}
	list, err := m.cfg.Store.ListSandboxes(ctx, scope(ctx))
	if err != nil {
		return nil, err
	}
	byName := map[poolKey]*PoolStatus{}
	out := make([]*PoolStatus, len(pools))
	for i, p := range pools {
		out[i] = &PoolStatus{Pool: p}
		byName[poolKey{p.Tenant, p.Name}] = out[i]
	}
	for _, sb := range list {
		ps := byName[poolOf(sb)]
		if ps == nil || sb.Desired == sandbox.DesiredDeleted {
			continue
		}
		ps.Members++
		if sb.Desired == sandbox.DesiredRunning && sb.Phase == sandbox.PhaseReady {
			ps.Ready++
		}
	}
	return out, nil
}

// DeletePool removes a pool of the caller's tenant and deletes its
// unclaimed members; sandboxes claimed from it are the users' and stay. A
// member the deletes miss (the gateway stops in between) belongs to no
// pool and the pool loop deletes it later.
func (ps *Pools) DeletePool(ctx context.Context, name string) (*PoolStatus, error) {
	m := ps.m
	done, err := m.admit()
	if err != nil {
		return nil, err
	}
	defer done()
	tenant := caller.From(ctx).Tenant
	p, err := m.cfg.Store.GetPool(ctx, tenant, name)
	if err != nil {
		return nil, err
	}
	if err := m.cfg.Store.DeletePool(ctx, tenant, name); err != nil {
		return nil, err
	}
	m.log.Info("pool deleted", "pool", name, "tenant", tenant)
	status := &PoolStatus{Pool: p}
	list, err := m.cfg.Store.ListSandboxes(ctx, tenant)
	if err != nil {
		return status, err
	}
	for _, sb := range list {
		if sb.PoolOf() == name && sb.Desired != sandbox.DesiredDeleted {
			status.Members++
			if _, err := ps.deleteMember(ctx, sb.ID); err != nil {
				return status, err
			}
		}
	}
	return status, nil
}

// deleteMember is Delete of a pool member, already admitted.
func (ps *Pools) deleteMember(ctx context.Context, id string) (*sandbox.Sandbox, error) {
	m := ps.m
	sb, err := m.Delete(ctx, id, false)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil, nil // deleted meanwhile, or claimed and renamed: gone from the pool either way
	}
	return sb, err
}

// Claim creates sandbox name from pool: it claims the pool's oldest ready
// member (renamed, labelled, journaled as a claim), or with none ready
// creates the pool's spec cold and says why in the result. The pool fixes
// the spec: the request's may give only labels.
func (ps *Pools) Claim(ctx context.Context, name, requestID, pool string, spec sandbox.Spec) (*Claimed, error) {
	m := ps.m
	done, err := m.admit()
	if err != nil {
		return nil, err
	}
	defer done()
	if spec.Image != "" || len(spec.Command) > 0 || spec.Policy != "" || spec.RestartPolicy != "" || spec.MaxRestarts != 0 || len(spec.Hosts) > 0 {
		return nil, errdefs.InvalidArgument("sandbox %q: a create from pool %q takes the pool's image, command and policy; give only its name and labels", name, pool)
	}
	labels := spec.Labels
	if err := sandbox.ValidateName(name); err != nil {
		return nil, err
	}
	if err := validateInput(name, requestID, sandbox.Spec{Labels: labels}); err != nil {
		return nil, err
	}
	now := m.now()
	tenant := caller.From(ctx).Tenant
	op := &sandbox.Operation{Kind: sandbox.OpClaim, State: sandbox.OpSucceeded, Owner: m.cfg.Instance, Epoch: m.cfg.Epoch,
		StartedAt: now, FinishedAt: now, Deadline: now, Detail: fmt.Sprintf("claimed from pool %q as %q", pool, name), Actor: askedBy(ctx)}
	sb, claimed, err := m.cfg.Store.ClaimSandbox(ctx, tenant, pool, store.Claim{Name: name, RequestID: requestID, Labels: labels, At: now, Op: op})
	switch {
	case err == nil:
		if claimed {
			m.log.Info("sandbox claimed from pool", "sandbox", name, "id", sb.ID, "pool", pool)
			if m.cfg.Egress != nil {
				m.cfg.Egress.Refresh(sb.ID) // its decisions carry the new name
			}
			m.events.publish(Event{Type: EventModified, Sandbox: sb})
			m.kick(sb.ID)
			ps.claimed()
		}
		return &Claimed{Sandbox: sb, Created: claimed, FromPool: claimed}, nil
	case !errors.Is(err, store.ErrNoneReady):
		return nil, err
	}
	p, err := m.cfg.Store.GetPool(ctx, tenant, pool)
	if err != nil {
		return nil, err
	}
	cold := p.Spec
	cold.Labels = maps.Clone(labels)
	sb, created, err := m.create(ctx, tenant, name, requestID, cold, "")
	if err != nil {
		return nil, err
	}
	ps.claimed()
	return &Claimed{Sandbox: sb, Created: created,
		Reason: fmt.Sprintf("pool %q had no ready sandbox; created one cold from its spec", pool)}, nil
}

// claimed notes a claim and wakes the pool loop, which waits for the
// claims to settle before it refills.
func (ps *Pools) claimed() {
	m := ps.m
	ps.lastClaim.Store(m.now().UnixNano())
	ps.kick()
}

// settleClaims waits until no claim has come for refillQuiet, at most
// refillMaxDelay; it reports false when the pool loop is stopping.
func (ps *Pools) settleClaims() bool {
	m := ps.m
	until := m.now().Add(refillMaxDelay)
	for {
		now := m.now()
		wait := time.Unix(0, ps.lastClaim.Load()).Add(refillQuiet).Sub(now)
		if wait <= 0 || !now.Before(until) {
			return true
		}
		select {
		case <-time.After(min(wait, until.Sub(now))):
		case <-ps.stop:
			return false
		}
	}
}

// kick wakes the pool loop.
func (ps *Pools) kick() {
	select {
	case ps.wake <- struct{}{}:
	default:
	}
}

// run starts the loop that keeps every pool full; Shutdown ends it.
func (ps *Pools) run() {
	ps.stop, ps.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(ps.done)
		tick := time.NewTicker(poolResync)
		defer tick.Stop()
		for {
			ps.refill()
			select {
			case <-ps.wake:
				if !ps.settleClaims() {
					return
				}
			case <-tick.C:
			case <-ps.stop:
				return
			}
		}
	}()
}

// end ends the pool loop, if it runs.
func (ps *Pools) end() {
	if ps.stop != nil {
		close(ps.stop)
		<-ps.done
		ps.stop = nil
	}
}

// refill is one level-based pass: it deletes unclaimed members of
// pools that are gone and members whose main process ended, and creates
// members until every pool has its size of them, refillAtOnce at a time
// (a member that becomes ready wakes the loop for the next).
func (ps *Pools) refill() {
	m := ps.m
	ctx, cancel := storeCtx()
	defer cancel()
	done, err := m.admit()
	if err != nil {
		return // shutting down
	}
	defer done()
	pools, err := m.cfg.Store.ListPools(ctx, "")
	if err != nil {
		m.log.Error("list pools", "err", err)
		return
	}
	list, err := m.cfg.Store.ListSandboxes(ctx, "")
	if err != nil {
		m.log.Error("list sandboxes for pools", "err", err)
		return
	}
	have, making := map[poolKey]int{}, 0
	for _, p := range pools {
		have[poolKey{p.Tenant, p.Name}] = 0
	}
	for _, sb := range list {
		key := poolOf(sb)
		if key.name == "" || sb.Desired == sandbox.DesiredDeleted {
			continue
		}
		if _, ok := have[key]; !ok || sb.Phase == sandbox.PhaseExited {
			if _, err := ps.deleteMember(ctx, sb.ID); err != nil {
				m.log.Error("delete pool member", "pool", key.name, "tenant", key.tenant, "sandbox", sb.Name, "err", err)
			}
			continue
		}
		have[key]++
		if sb.Phase == sandbox.PhaseProvisioning || sb.Phase == sandbox.PhaseStarting {
			making++
		}
	}
	for _, p := range pools {
		for n := have[poolKey{p.Tenant, p.Name}]; n < p.Size && making < refillAtOnce; n++ {
			making++
			if _, _, err := m.create(ctx, p.Tenant, p.MemberName(), "", p.Spec, p.Name); err != nil {
				m.log.Error("create pool member", "pool", p.Name, "tenant", p.Tenant, "err", err)
				break
			}
		}
	}
}

// poolKey names a pool: names are unique within a tenant.
type poolKey struct{ tenant, name string }

// poolOf is the pool a record is an unclaimed member of; its name is ""
// when none.
func poolOf(sb *sandbox.Sandbox) poolKey { return poolKey{sb.Tenant, sb.PoolOf()} }
