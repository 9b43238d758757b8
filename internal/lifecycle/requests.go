package lifecycle

import (
	"context"
	"errors"
	"maps"
	"slices"

	"github.com/corral-sandbox/corral/internal/caller"
	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/policy"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/secrets"
	"github.com/corral-sandbox/corral/internal/store"
)

// errNoChange rolls back a mutation that would not change the intent.
var errNoChange = errors.New("no change")

// admit lets a request that writes to the store in, unless the gateway is
// shutting down; the caller calls done when its writes are over. Shutdown
// waits for admitted requests before it settles the journal, so no request
// entry is written after the settling.
func (m *Manager) admit() (done func(), err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closing {
		return nil, errdefs.Unavailable("the gateway is shutting down; retry when it is back")
	}
	m.requests.Add(1)
	return m.requests.Done, nil
}

// request is a new pending request entry of the journal, by the caller
// of ctx.
func (m *Manager) request(ctx context.Context, sb *sandbox.Sandbox, kind sandbox.OpKind) *sandbox.Operation {
	return &sandbox.Operation{
		SandboxID: sb.ID, Kind: kind, State: sandbox.OpPending, Owner: m.cfg.Instance, Epoch: m.cfg.Epoch,
		Generation: sb.Generation, StartedAt: sb.UpdatedAt, Deadline: sb.Deadline, Actor: askedBy(ctx),
	}
}

// Create records a new sandbox that should run, in the tenant of the
// caller of ctx, and wakes its actor. A create with the requestID of an
// earlier one in the tenant returns that sandbox with created=false.
func (m *Manager) Create(ctx context.Context, name, requestID string, spec sandbox.Spec) (*sandbox.Sandbox, bool, error) {
	done, err := m.admit()
	if err != nil {
		return nil, false, err
	}
	defer done()
	return m.create(ctx, caller.From(ctx).Tenant, name, requestID, spec, "")
}

// create is Create in tenant once the request is admitted; a pool's name
// makes the sandbox an unclaimed member of it (a label callers cannot set).
func (m *Manager) create(ctx context.Context, tenant, name, requestID string, spec sandbox.Spec, pool string) (*sandbox.Sandbox, bool, error) {
	if err := sandbox.ValidateName(name); err != nil {
		return nil, false, err
	}
	if err := spec.ValidateRestart(); err != nil {
		return nil, false, err
	}
	if spec.Image == "" {
		spec.Image = m.cfg.DefaultImage
	}
	if err := validateInput(name, requestID, spec); err != nil {
		return nil, false, err
	}
	pol, err := m.validate(name, spec.Image, spec.Command, spec.Policy)
	if err != nil {
		return nil, false, err
	}
	if err := m.checkSecrets(ctx, tenant, name, pol); err != nil {
		return nil, false, err
	}
	if _, ok := m.cfg.Driver.(driver.Seeder); spec.Seed != "" && (!ok || m.cfg.Seeds == nil) {
		return nil, false, errdefs.NotImplemented("the %s driver cannot make sandboxes from snapshots", m.cfg.Driver.Name())
	}
	if spec.Memory != "" {
		if _, ok := m.cfg.Driver.(driver.Checkpointer); !ok {
			return nil, false, errdefs.NotImplemented("the %s driver cannot restore a memory snapshot (only native's gVisor tier can)", m.cfg.Driver.Name())
		}
		if !pol.GVisor() || !pol.Lifecycle.MemorySnapshots {
			return nil, false, errdefs.InvalidArgument("a memory snapshot restores only on a policy with isolation: gvisor and lifecycle.memory_snapshots: true, as it was taken")
		}
	}
	spec.Labels = maps.Clone(spec.Labels)
	if pool != "" {
		spec.Labels = map[string]string{sandbox.LabelPool: pool}
	}
	now := m.now()
	sb := &sandbox.Sandbox{
		ID: sandbox.NewID(), Name: name, Tenant: tenant, RequestID: requestID, Spec: spec,
		Desired: sandbox.DesiredRunning, Phase: sandbox.PhaseProvisioning, Generation: 1,
		CreatedAt: now, UpdatedAt: now, Deadline: now.Add(m.cfg.ProvisioningTimeout), Resources: resources(pol),
	}
	req := m.request(ctx, sb, sandbox.OpCreate)
	if spec.SeedFrom != "" {
		req.Detail = "from snapshot " + spec.SeedFrom
	}
	got, created, err := m.cfg.Store.CreateSandbox(ctx, sb, req)
	if err != nil {
		return nil, false, err
	}
	if created {
		m.log.Info("sandbox created", "sandbox", name, "id", sb.ID, "tenant", tenant, "from_snapshot", spec.SeedFrom)
		m.events.publish(Event{Type: EventAdded, Sandbox: got})
	}
	m.kick(got.ID)
	return got, created, nil
}

// Get returns a sandbox by name or id, of a tenant the caller of ctx
// sees: another tenant's is not found, as if it did not exist.
func (m *Manager) Get(ctx context.Context, nameOrID string) (*sandbox.Sandbox, error) {
	sb, err := m.cfg.Store.GetSandboxByName(ctx, scope(ctx), nameOrID)
	if errors.Is(err, errdefs.ErrNotFound) {
		sb, err = m.cfg.Store.GetSandbox(ctx, nameOrID)
		if err == nil && !caller.From(ctx).Sees(sb.Tenant) {
			err = errdefs.ErrNotFound
		}
	}
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil, errdefs.NotFound("sandbox %q not found", nameOrID)
	}
	if err == nil && caller.Identified(ctx) {
		m.clock.touch(sb.ID, m.now()) // an API call naming it is activity
	}
	return sb, err
}

// List returns the sandboxes the caller of ctx sees, oldest first.
func (m *Manager) List(ctx context.Context) ([]*sandbox.Sandbox, error) {
	return m.cfg.Store.ListSandboxes(ctx, scope(ctx))
}

// Operations returns the journal of a sandbox, oldest first.
func (m *Manager) Operations(ctx context.Context, nameOrID string) ([]*sandbox.Operation, error) {
	sb, err := m.Get(ctx, nameOrID)
	if err != nil {
		return nil, err
	}
	return m.cfg.Store.ListOperations(ctx, sb.ID)
}

// Stop sets a sandbox's intent to stopped.
func (m *Manager) Stop(ctx context.Context, nameOrID string) (*sandbox.Sandbox, error) {
	return m.changeIntent(ctx, nameOrID, sandbox.OpStop, "", stopIntent)
}

// stopIntent is a stop's change of a record.
func stopIntent(sb *sandbox.Sandbox) error {
	switch sb.Desired {
	case sandbox.DesiredDeleted:
		return errdefs.FailedPrecondition("sandbox %q is being deleted; it cannot be stopped", sb.Name)
	case sandbox.DesiredStopped:
		return errNoChange
	}
	sb.Desired = sandbox.DesiredStopped
	if sb.Phase != sandbox.PhaseStopped {
		sb.Phase = sandbox.PhaseStopping
	}
	return nil
}

// Start sets a sandbox's intent to running; a stopped, exited or failed
// sandbox (paused ones included) gets a new generation, so nothing of its
// old incarnation can be mistaken for it; a paused one is thawed.
func (m *Manager) Start(ctx context.Context, nameOrID string) (*sandbox.Sandbox, error) {
	return m.changeIntent(ctx, nameOrID, sandbox.OpStart, "", func(sb *sandbox.Sandbox) error {
		switch sb.Desired {
		case sandbox.DesiredDeleted:
			return errdefs.FailedPrecondition("sandbox %q is being deleted; it cannot be started", sb.Name)
		case sandbox.DesiredPaused:
			if sb.Phase != sandbox.PhaseExited && sb.Phase != sandbox.PhaseError {
				return resume(sb) // the same incarnation, thawed
			}
			// its incarnation ended while it was paused: a new one
		case sandbox.DesiredRunning:
			if sb.Phase != sandbox.PhaseExited && sb.Phase != sandbox.PhaseError {
				return errNoChange
			}
		}
		sb.Desired = sandbox.DesiredRunning
		sb.Generation++
		sb.Restarts = 0
		if sb.Phase != sandbox.PhaseProvisioning {
			sb.Phase = sandbox.PhaseStarting
		}
		return nil
	})
}

// Pause sets a running sandbox's intent to paused: every process frozen,
// its memory kept, no CPU used, until Resume (or Start, Stop, Delete). A
// paused sandbox stays paused across gateway restarts and is never
// restarted by its restart policy. With memory, its processes and memory
// are checkpointed out and the memory freed instead (a MemoryPauser
// driver, on a policy with lifecycle.memory_snapshots).
func (m *Manager) Pause(ctx context.Context, nameOrID string, memory bool) (*sandbox.Sandbox, error) {
	if _, ok := m.cfg.Driver.(driver.Pauser); !ok {
		return nil, errdefs.NotImplemented("the %s driver cannot pause sandboxes", m.cfg.Driver.Name())
	}
	if _, ok := m.cfg.Driver.(driver.MemoryPauser); memory && !ok {
		return nil, errdefs.FailedPrecondition("the %s driver cannot pause with memory: only native's gVisor tier checkpoints memory; pause without --memory freezes the processes in place", m.cfg.Driver.Name())
	}
	return m.changeIntent(ctx, nameOrID, sandbox.OpPause, pauseDetail(memory), func(sb *sandbox.Sandbox) error {
		return pauseIntent(sb, memory)
	})
}

// pauseDetail is the journal's word on a pause.
func pauseDetail(memory bool) string {
	if memory {
		return "memory: checkpointed out and freed"
	}
	return ""
}

// pauseIntent is a pause's change of a record.
func pauseIntent(sb *sandbox.Sandbox, memory bool) error {
	switch sb.Desired {
	case sandbox.DesiredPaused:
		if memory && !sb.PauseMemory {
			return errdefs.FailedPrecondition("sandbox %q is paused with its memory in place: resume it first to pause it with --memory", sb.Name)
		}
		return errNoChange
	case sandbox.DesiredDeleted:
		return errdefs.FailedPrecondition("sandbox %q is being deleted; it cannot be paused", sb.Name)
	case sandbox.DesiredStopped:
		return errdefs.FailedPrecondition("sandbox %q is stopped; only a running sandbox can be paused", sb.Name)
	}
	if sb.Phase == sandbox.PhaseExited || sb.Phase == sandbox.PhaseError {
		return errdefs.FailedPrecondition("sandbox %q is %s; only a running sandbox can be paused", sb.Name, sb.Phase)
	}
	if memory {
		if pol, err := policy.Parse(sb.Spec.Policy); err != nil || !pol.GVisor() || !pol.Lifecycle.MemorySnapshots {
			return errdefs.FailedPrecondition("sandbox %q cannot be paused with --memory: its policy needs isolation: gvisor and lifecycle.memory_snapshots: true "+
				"(runsc checkpoints only a sandbox on gVisor's own network stack; CRIU cannot restore the namespaces tier's Landlock domain); pause without --memory freezes it in place", sb.Name)
		}
	}
	sb.Desired, sb.PauseMemory = sandbox.DesiredPaused, memory
	if sb.Phase == sandbox.PhaseReady {
		sb.Phase = sandbox.PhasePausing
	}
	return nil
}

// Resume sets a paused sandbox's intent back to running: the same
// incarnation, thawed.
func (m *Manager) Resume(ctx context.Context, nameOrID string) (*sandbox.Sandbox, error) {
	return m.changeIntent(ctx, nameOrID, sandbox.OpResume, "", func(sb *sandbox.Sandbox) error {
		if sb.Desired != sandbox.DesiredPaused {
			if sb.Desired == sandbox.DesiredRunning {
				return errNoChange
			}
			return errdefs.FailedPrecondition("sandbox %q is not paused but %s", sb.Name, sb.Desired)
		}
		return resume(sb)
	})
}

// Awake returns sb as it is, or, when it is paused, resumed and ready:
// what an exec, a file operation or a connection to one of its ports
// asks first. A paused sandbox whose policy does not say
// lifecycle.auto_resume is refused, saying so.
func (m *Manager) Awake(ctx context.Context, sb *sandbox.Sandbox) (*sandbox.Sandbox, error) {
	m.clock.touch(sb.ID, m.now())
	if sb.Desired != sandbox.DesiredPaused {
		return sb, nil
	}
	if pol, err := policy.Parse(sb.Spec.Policy); err != nil || !pol.Lifecycle.AutoResume {
		return nil, errdefs.FailedPrecondition("sandbox %q is paused: resume it first (corral sandbox resume %s), or let its policy do it (lifecycle.auto_resume: true)",
			sb.Name, sb.Name)
	}
	resumed, err := m.Resume(ctx, sb.ID)
	if err != nil {
		return nil, err
	}
	return m.Wait(ctx, sb.ID, GoalRunning, resumed.Revision, nil)
}

// resume sets a paused record's intent to running, in the same
// generation.
func resume(sb *sandbox.Sandbox) error {
	sb.Desired = sandbox.DesiredRunning
	if sb.Phase == sandbox.PhasePaused || sb.Phase == sandbox.PhasePausing {
		sb.Phase = sandbox.PhaseStarting
	}
	return nil
}

// Delete sets a sandbox's intent to deleted, in any phase. It cancels a
// driver call in flight for the sandbox, and with force also skips the
// graceful stop.
func (m *Manager) Delete(ctx context.Context, nameOrID string, force bool) (*sandbox.Sandbox, error) {
	detail := ""
	if force {
		detail = "force: no graceful stop"
	}
	return m.deleteWith(ctx, nameOrID, force, detail)
}

// deleteWith is Delete, its journal entry saying detail.
func (m *Manager) deleteWith(ctx context.Context, nameOrID string, force bool, detail string) (*sandbox.Sandbox, error) {
	sb, err := m.changeIntent(ctx, nameOrID, sandbox.OpDelete, detail, func(sb *sandbox.Sandbox) error {
		if sb.Desired == sandbox.DesiredDeleted {
			return errNoChange
		}
		sb.Desired = sandbox.DesiredDeleted
		sb.Phase = sandbox.PhaseDeleting
		return nil
	})
	if err != nil {
		return nil, err
	}
	m.preempt(sb.ID, force)
	return sb, nil
}

// UpdatePolicy replaces the policy of a sandbox. A stopped one takes it
// whole at its next start (a new incarnation); a running one only when
// nothing but its network_policies differ, which its egress proxy
// enforces at once, closing the connections they no longer allow.
func (m *Manager) UpdatePolicy(ctx context.Context, nameOrID, text string) (*sandbox.Sandbox, error) {
	if err := validatePolicySize(nameOrID, text); err != nil {
		return nil, err
	}
	// Checked here, before the change, which runs inside the store's
	// write; a policy that does not parse is refused there, by name.
	var held sandbox.Resources
	if pol, err := policy.Parse(text); err == nil {
		was, err := m.Get(ctx, nameOrID)
		if err != nil {
			return nil, err
		}
		if err := m.checkSecrets(ctx, was.Tenant, nameOrID, pol); err != nil {
			return nil, err
		}
		held = resources(pol)
	}
	live := false
	sb, err := m.changeIntent(ctx, nameOrID, sandbox.OpUpdate, "", func(sb *sandbox.Sandbox) error {
		if _, err := m.validate(sb.Name, sb.Spec.Image, sb.Spec.Command, text); err != nil {
			return err
		}
		if live = sb.Desired != sandbox.DesiredStopped || sb.Phase != sandbox.PhaseStopped; live {
			if err := m.checkNetworkChange(sb, text); err != nil {
				return err
			}
		}
		if sb.Spec.Policy == text {
			return errNoChange
		}
		sb.Spec.Policy, sb.Resources = text, held
		return nil
	})
	if err == nil && live {
		m.cfg.Egress.Refresh(sb.ID)
	}
	return sb, err
}

// validate checks a spec's policy, and lets the driver refuse what it
// will never run. It returns the policy parsed.
func (m *Manager) validate(name, image string, command []string, policyText string) (policy.Policy, error) {
	pol, err := policy.Parse(policyText)
	if err != nil {
		return pol, errdefs.InvalidArgument("sandbox %q: %v", name, err)
	}
	if len(pol.Network) > 0 && m.cfg.Egress == nil {
		return pol, errdefs.InvalidArgument("sandbox %q: network_policies need an egress proxy, and this gateway has none: %s", name, m.cfg.NoEgress)
	}
	if _, ok := m.cfg.Driver.(driver.Pauser); !ok && pol.Lifecycle.OnIdle == policy.OnPause {
		return pol, errdefs.InvalidArgument("sandbox %q: lifecycle.on_idle pause: the %s driver cannot pause sandboxes; say stop or delete", name, m.cfg.Driver.Name())
	}
	if len(pol.Credentials) > 0 && m.cfg.Egress == nil {
		return pol, errdefs.InvalidArgument("sandbox %q: credentials need an egress proxy, and this gateway has none: %s", name, m.cfg.NoEgress)
	}
	if v, ok := m.cfg.Driver.(driver.Validator); ok {
		return pol, v.Validate(driver.Spec{Name: name, Image: image, Command: command, Policy: pol})
	}
	return pol, nil
}

// checkSecrets refuses a policy that binds a secret its tenant does not
// have.
func (m *Manager) checkSecrets(ctx context.Context, tenant, name string, pol policy.Policy) error {
	if m.cfg.SecretExists == nil {
		return nil
	}
	for _, secret := range pol.Secrets() {
		if err := m.cfg.SecretExists(ctx, tenant, secret); errors.Is(err, errdefs.ErrNotFound) {
			return errdefs.InvalidArgument("sandbox %q: its policy binds secret %q, which does not exist: corral secret create %s", name, secret, secret)
		} else if err != nil {
			return err
		}
	}
	return nil
}

// Binders lists the sandboxes of tenant whose policies bind its secret,
// and whether each runs (or is to run).
func (m *Manager) Binders(ctx context.Context, tenant, secret string) ([]secrets.Binder, error) {
	list, err := m.cfg.Store.ListSandboxes(ctx, tenant)
	if err != nil {
		return nil, err
	}
	var out []secrets.Binder
	for _, sb := range list {
		pol, err := policy.Parse(sb.Spec.Policy)
		if err != nil || !slices.Contains(pol.Secrets(), secret) {
			continue
		}
		out = append(out, secrets.Binder{Name: sb.Name, Running: sb.Desired != sandbox.DesiredStopped || sb.Phase != sandbox.PhaseStopped})
	}
	return out, nil
}

// changeIntent applies change to a record together with a request entry,
// then wakes the actor. A change also sets the phase that shows the gateway
// is working on it, so a record never looks converged on an intent it has
// not reached. A change that changes nothing writes nothing but
// still wakes the actor, so a repeated request retries at once.
func (m *Manager) changeIntent(ctx context.Context, nameOrID string, kind sandbox.OpKind, detail string, change func(*sandbox.Sandbox) error) (*sandbox.Sandbox, error) {
	done, err := m.admit()
	if err != nil {
		return nil, err
	}
	defer done()
	if m.cfg.Failures.RetainedClaim {
		if err := m.claimPending(ctx, nameOrID); err != nil {
			return nil, err
		}
	}
	id := ""
	tenant := scope(ctx)
	named := func(ctx context.Context, key string, fn func(sb *sandbox.Sandbox) (store.Mutation, error)) (*sandbox.Sandbox, error) {
		return m.cfg.Store.MutateNamed(ctx, tenant, key, fn)
	}
	sb, err := m.mutateWith(named, nameOrID, func(sb *sandbox.Sandbox) (store.Mutation, error) {
		id = sb.ID
		if err := change(sb); err != nil {
			return store.Mutation{}, err
		}
		if sb.Desired != sandbox.DesiredPaused {
			sb.PauseMemory = false // how it was paused, until it is not
		}
		sb.Deadline = m.now().Add(m.deadlineFor(sb.Desired))
		sb.UpdatedAt = m.now()
		req := m.request(ctx, sb, kind)
		req.Detail = detail
		return store.Mutation{Request: req}, nil
	})
	switch {
	case errors.Is(err, errNoChange):
		m.nudge(id)
		return m.Get(ctx, id)
	case errors.Is(err, errdefs.ErrNotFound):
		return nil, errdefs.NotFound("sandbox %q not found", nameOrID)
	case err != nil:
		return nil, err
	}
	m.log.Info("intent changed", "sandbox", sb.Name, "desired", sb.Desired, "generation", sb.Generation)
	m.kick(sb.ID)
	return sb, nil
}
