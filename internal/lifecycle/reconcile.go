package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/metrics"
	"github.com/corral-sandbox/corral/internal/policy"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/store"
)

// action is the next driver call that brings a sandbox closer to its intent.
type action struct {
	kind  sandbox.OpKind // a driver.* kind
	phase sandbox.Phase  // the phase shown while it runs
	gen   int64          // the generation it acts on

	ref    driver.Ref         // start and stop: the incarnation; delete: the id
	spec   driver.Spec        // create, but its policy:
	policy string             // create: the policy's text, parsed by call
	held   sandbox.Resources  // create: what its tenant's quota counts it at
	stop   driver.StopOptions // stop
	seed   string             // seed: the snapshot's manifest
	memory string             // seed: its memory image, when it has one
	// pause: checkpoint the memory out (MemoryPauser) rather than freeze
	pauseMemory bool
}

// call makes the driver call of an action.
func (m *Manager) call(ctx context.Context, act action) error {
	d := m.cfg.Driver
	switch act.kind {
	case sandbox.OpDriverCreate:
		// Checked when it was recorded; a policy this gateway cannot read
		// (a newer one's) never runs as no policy.
		pol, err := policy.Parse(act.policy)
		if err != nil {
			return errdefs.InvalidArgument("sandbox %s: %v", act.spec.Name, err)
		}
		spec := act.spec
		spec.Policy = withHeld(pol, act.held)
		return d.Create(ctx, spec)
	case sandbox.OpDriverStart:
		return d.Start(ctx, act.ref)
	case sandbox.OpDriverStop:
		return d.Stop(ctx, act.ref, act.stop)
	case sandbox.OpDriverDelete:
		return d.Delete(ctx, act.ref.ID)
	case sandbox.OpDriverSeed:
		return m.seed(ctx, act)
	case sandbox.OpDriverPause, sandbox.OpDriverResume:
		p, ok := d.(driver.Pauser)
		if !ok {
			return errdefs.NotImplemented("the %s driver cannot pause sandboxes", d.Name())
		}
		if act.kind == sandbox.OpDriverPause && act.pauseMemory {
			mp, ok := d.(driver.MemoryPauser)
			if !ok {
				return errdefs.FailedPrecondition("the %s driver cannot pause with memory", d.Name())
			}
			return mp.PauseMemory(ctx, act.ref)
		}
		if act.kind == sandbox.OpDriverPause {
			return p.Pause(ctx, act.ref)
		}
		return p.Resume(ctx, act.ref)
	}
	return fmt.Errorf("no driver call for an action of kind %q", act.kind)
}

// step observes one sandbox and takes at most one driver action. It reports
// whether to step again at once, or else how long to wait before retrying
// (0: nothing to do until the next wake-up).
func (m *Manager) step(a *actor) (again bool, retryIn time.Duration) {
	sctx, cancel := storeCtx()
	sb, err := m.cfg.Store.GetSandbox(sctx, a.id)
	cancel()
	if errors.Is(err, errdefs.ErrNotFound) {
		m.markGone(a)
		return false, 0
	}
	if err != nil {
		m.log.Error("read sandbox record", "id", a.id, "err", err)
		return false, m.backoff(a.failures + 1)
	}
	m.clock.note(sb)
	if sb.Desired == sandbox.DesiredDeleted && m.forced(a) {
		// A forced delete removes by label whatever is there, and a delete
		// of nothing succeeds: nothing Inspect could find would change it.
		return m.act(a, sb, deleteAction(sb))
	}

	ictx, cancel := context.WithTimeout(m.callCtx, m.cfg.CallTimeout)
	obs, err := m.cfg.Driver.Inspect(ictx, sb.ID)
	cancel()
	found := err == nil
	if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		return m.failed(a, sb, "driver.inspect", err)
	}

	if sb.Desired == sandbox.DesiredDeleted && !found {
		m.remove(a, sb)
		return false, 0
	}
	if runs(sb.Desired) && found && obs.Generation == sb.Generation {
		switch obs.State {
		case driver.StateStopped:
			return m.exited(a, sb, obs.ExitCode)
		case driver.StateFailed:
			m.broke(a, sb, obs.Message)
			return false, 0
		}
	}
	act, ok := decide(situation{sb: sb, obs: obs, found: found, force: m.forced(a), failures: a.failures,
		stopTimeout: m.cfg.StopTimeout})
	if !ok {
		if runs(sb.Desired) {
			if err := m.ensureEgress(sb); err != nil {
				return m.failed(a, sb, "egress.attach", err)
			}
		}
		m.converge(a, sb)
		return false, 0
	}
	return m.act(a, sb, act)
}

// act takes one driver action: it shows its phase, makes the attempt and
// says whether to step again.
func (m *Manager) act(a *actor, sb *sandbox.Sandbox, act action) (again bool, retryIn time.Duration) {
	op, err := m.journalCall(a, sb, act)
	if err != nil {
		m.log.Error("journal a driver call", "sandbox", sb.Name, "call", act.kind, "err", err)
		return false, m.backoff(a.failures + 1)
	}
	if err := m.attempt(a, op, act); err != nil {
		if errors.Is(err, errPreempted) {
			return true, 0
		}
		return m.failed(a, sb, string(act.kind), err)
	}
	a.failures = 0
	if act.kind == sandbox.OpDriverSeed {
		// Once the files are in, the start goes on; a gateway that dies
		// before this write seeds again, replacing what it put there.
		if _, err := m.mutateStep(a, sb.ID, func(cur *sandbox.Sandbox) (store.Mutation, error) {
			cur.Spec.Seed, cur.Spec.Memory = "", ""
			return store.Mutation{}, nil
		}); err != nil {
			m.log.Error("record a seeded sandbox", "sandbox", sb.Name, "err", err)
			return false, m.backoff(a.failures + 1)
		}
	}
	if act.kind == sandbox.OpDriverDelete {
		// The driver confirmed that no compute object of the sandbox is
		// left (its delete of a missing one succeeds), which is all the next
		// step's Inspect would learn; the intent cannot change any more.
		m.remove(a, sb)
		return false, 0
	}
	return true, 0
}

// situation is what the reconciler decides from: the record, what the
// driver reports of its compute, and the state of the sandbox's actor.
type situation struct {
	sb       *sandbox.Sandbox
	obs      driver.Object // the driver's object, when found
	found    bool
	force    bool // delete without a graceful stop
	failures int  // consecutive failed attempts

	stopTimeout time.Duration // the main process's grace on a stop
}

// decide picks the next action, or reports false when the driver already
// matches the intent. It is a pure function of the situation.
func decide(s situation) (action, bool) {
	sb, obs := s.sb, s.obs
	paused := s.found && obs.State == driver.StatePaused
	running := s.found && obs.State == driver.StateRunning || paused // a stop thaws a paused one
	current := s.found && obs.Generation == sb.Generation
	stop := func(phase sandbox.Phase) action {
		return action{kind: sandbox.OpDriverStop, phase: phase, gen: obs.Generation,
			ref:  driver.Ref{ID: sb.ID, Generation: obs.Generation},
			stop: driver.StopOptions{Timeout: s.stopTimeout, Force: s.force}}
	}
	switch sb.Desired {
	case sandbox.DesiredDeleted:
		if running && !s.force && s.failures == 0 {
			return stop(sandbox.PhaseDeleting), true
		}
		return deleteAction(sb), true
	case sandbox.DesiredStopped:
		if running {
			return stop(sandbox.PhaseStopping), true
		}
		return action{}, false
	case sandbox.DesiredPaused:
		// a running incarnation is frozen; one that does not run is
		// started as for running, and frozen at the next step
		switch {
		case paused && current:
			return action{}, false
		case running && current:
			return action{kind: sandbox.OpDriverPause, phase: sandbox.PhasePausing, gen: sb.Generation,
				ref: driver.Ref{ID: sb.ID, Generation: sb.Generation}, pauseMemory: sb.PauseMemory}, true
		}
	case sandbox.DesiredRunning:
		if paused && current {
			return action{kind: sandbox.OpDriverResume, phase: sandbox.PhaseStarting, gen: sb.Generation,
				ref: driver.Ref{ID: sb.ID, Generation: sb.Generation}}, true
		}
	}
	startPhase := sandbox.PhaseStarting
	if sb.Phase == sandbox.PhaseProvisioning {
		startPhase = sandbox.PhaseProvisioning
	}
	create := func(phase sandbox.Phase) action {
		return action{kind: sandbox.OpDriverCreate, phase: phase, gen: sb.Generation,
			spec: driver.Spec{ID: sb.ID, Name: sb.Name, Generation: sb.Generation, Image: sb.Spec.Image,
				Command: sb.Spec.Command, Labels: sb.Spec.Labels}, policy: sb.Spec.Policy, held: sb.Resources}
	}
	switch {
	case !s.found:
		return create(sandbox.PhaseProvisioning), true
	case running && obs.Generation != sb.Generation:
		return stop(startPhase), true // retire the old incarnation first
	case obs.Generation != sb.Generation:
		return create(startPhase), true // a new incarnation replaces the stopped one
	case !running && sb.Spec.Seed != "":
		return action{kind: sandbox.OpDriverSeed, phase: startPhase, gen: sb.Generation,
			ref: driver.Ref{ID: sb.ID, Generation: sb.Generation}, seed: sb.Spec.Seed, memory: sb.Spec.Memory}, true
	case !running:
		return action{kind: sandbox.OpDriverStart, phase: startPhase, gen: sb.Generation,
			ref: driver.Ref{ID: sb.ID, Generation: sb.Generation}}, true
	}
	return action{}, false
}

// runs reports whether an intent has an incarnation run (frozen or not),
// whose exit or failure is recorded.
func runs(d sandbox.DesiredState) bool {
	return d == sandbox.DesiredRunning || d == sandbox.DesiredPaused
}

// deleteAction removes every compute object of a sandbox.
func deleteAction(sb *sandbox.Sandbox) action {
	return action{kind: sandbox.OpDriverDelete, phase: sandbox.PhaseDeleting, gen: sb.Generation,
		ref: driver.Ref{ID: sb.ID}}
}

func (m *Manager) forced(a *actor) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return a.force
}

// journalCall writes the pending entry of an action's driver call, with the
// phase the action runs in when the record does not show it yet (one
// write: a sandbox that had converged and drifted gets a fresh deadline for
// getting back) and the entries the actor settled and has not written yet.
func (m *Manager) journalCall(a *actor, sb *sandbox.Sandbox, act action) (*sandbox.Operation, error) {
	now := m.now()
	op := &sandbox.Operation{
		SandboxID: sb.ID, Kind: act.kind, State: sandbox.OpPending, Owner: m.cfg.Instance, Epoch: m.cfg.Epoch,
		Attempt: a.failures + 1, Generation: act.gen, StartedAt: now, Deadline: now.Add(m.callTimeout(act)),
	}
	if act.pauseMemory {
		op.Detail = pauseDetail(true)
	}
	if sb.Phase == act.phase {
		sctx, cancel := storeCtx()
		err := m.cfg.Store.PutOperation(sctx, append(a.settled, op)...)
		cancel()
		if err != nil {
			return nil, err
		}
		a.settled = nil
		return op, nil
	}
	wasConverged := sb.Converged()
	_, err := m.mutateStep(a, sb.ID, func(cur *sandbox.Sandbox) (store.Mutation, error) {
		cur.Phase = act.phase
		if wasConverged {
			cur.Deadline = m.now().Add(m.deadlineFor(cur.Desired))
		}
		return store.Mutation{Put: []*sandbox.Operation{op}}, nil
	})
	return op, err
}

// callTimeout is how long an action's driver call may take.
func (m *Manager) callTimeout(act action) time.Duration {
	if act.kind == sandbox.OpDriverStop {
		return m.cfg.CallTimeout + m.cfg.StopTimeout
	}
	return m.cfg.CallTimeout
}

// converge records that a sandbox has reached its intent and settles its
// pending request.
func (m *Manager) converge(a *actor, sb *sandbox.Sandbox) {
	a.failures = 0
	phase := sandbox.PhaseReady
	switch sb.Desired {
	case sandbox.DesiredStopped:
		phase = sandbox.PhaseStopped
	case sandbox.DesiredPaused:
		phase = sandbox.PhasePaused
	}
	pending := sb.LastRequest != nil && sb.LastRequest.State == sandbox.OpPending
	if sb.Phase == phase && sb.Reason == "" && !pending {
		return
	}
	_, err := m.mutateStep(a, sb.ID, func(cur *sandbox.Sandbox) (store.Mutation, error) {
		if cur.Desired != sb.Desired || cur.Generation != sb.Generation {
			return store.Mutation{}, errNoChange // the intent moved on meanwhile
		}
		cur.Phase, cur.Reason = phase, ""
		return store.Mutation{SettleRequests: sandbox.OpSucceeded}, nil
	})
	if err != nil && !errors.Is(err, errNoChange) {
		m.log.Error("record convergence", "sandbox", sb.Name, "err", err)
	}
	if err == nil {
		if pending {
			metrics.Converged(string(sb.LastRequest.Kind), sb.LastRequest.StartedAt)
		}
		m.log.Info("sandbox converged", "sandbox", sb.Name, "phase", phase, "generation", sb.Generation)
		if sb.PoolOf() != "" {
			m.pools.kick() // the next member of a refill
		}
	}
}

// exited handles a main process that ended on its own: the restart policy
// either restarts it as a new generation after a backoff, or the sandbox
// rests in phase exited with the exit code.
func (m *Manager) exited(a *actor, sb *sandbox.Sandbox, code int) (bool, time.Duration) {
	now := m.now()
	// a main process that ended while paused (killed: a frozen one cannot
	// exit) is recorded, never restarted: the intent is a frozen process
	restart := sb.Desired == sandbox.DesiredRunning && sb.Spec.ShouldRestart(code) && sb.Restarts < sb.Spec.MaxRestarts
	if restart && (a.restartGen != sb.Generation || a.restartDue.IsZero()) {
		wait := m.restartBackoff(sb.Restarts + 1)
		a.restartGen, a.restartDue = sb.Generation, now.Add(wait)
		reason := fmt.Sprintf("main process exited with code %d; restart %d of %d in %s (restart policy %s)",
			code, sb.Restarts+1, sb.Spec.MaxRestarts, wait, sb.Spec.RestartPolicy)
		m.recordExit(a, sb, code, reason, false)
		return false, wait
	}
	if restart {
		if wait := a.restartDue.Sub(now); wait > 0 {
			return false, wait
		}
		a.restartDue = time.Time{}
		_, err := m.mutateStep(a, sb.ID, func(cur *sandbox.Sandbox) (store.Mutation, error) {
			if cur.Generation != sb.Generation || cur.Desired != sandbox.DesiredRunning {
				return store.Mutation{}, errNoChange
			}
			cur.Generation++
			cur.Restarts++
			cur.Phase = sandbox.PhaseStarting
			cur.Deadline = now.Add(m.cfg.ProvisioningTimeout)
			return store.Mutation{}, nil
		})
		if err != nil && !errors.Is(err, errNoChange) {
			m.log.Error("record restart", "sandbox", sb.Name, "err", err)
			return false, m.backoff(1)
		}
		m.log.Info("restarting sandbox after its main process exited", "sandbox", sb.Name, "exit_code", code)
		return true, 0
	}
	reason := fmt.Sprintf("main process exited with code %d", code)
	if sb.Spec.ShouldRestart(code) {
		reason += fmt.Sprintf("; not restarted: the limit of %d restarts is reached", sb.Spec.MaxRestarts)
	}
	m.recordExit(a, sb, code, reason, true)
	return false, 0
}

// broke records that a sandbox's compute failed under it (its supervisor
// was killed, say): the phase is error with the driver's reason until a
// start (a new incarnation), stop or delete.
func (m *Manager) broke(a *actor, sb *sandbox.Sandbox, message string) {
	reason := "the sandbox's compute failed: " + message + "; start it again or delete it"
	if sb.Phase == sandbox.PhaseError && sb.Reason == reason {
		return
	}
	_, err := m.mutateStep(a, sb.ID, func(cur *sandbox.Sandbox) (store.Mutation, error) {
		if cur.Generation != sb.Generation || !runs(cur.Desired) {
			return store.Mutation{}, errNoChange
		}
		cur.Phase, cur.Reason = sandbox.PhaseError, reason
		return store.Mutation{SettleRequests: sandbox.OpFailed}, nil
	})
	if err != nil && !errors.Is(err, errNoChange) {
		m.log.Error("record failure", "sandbox", sb.Name, "err", err)
	}
	m.log.Warn("sandbox compute failed", "sandbox", sb.Name, "reason", message)
}

func (m *Manager) recordExit(a *actor, sb *sandbox.Sandbox, code int, reason string, final bool) {
	if sb.Phase == sandbox.PhaseExited && sb.Reason == reason && sb.ExitCode != nil && *sb.ExitCode == code {
		return
	}
	_, err := m.mutateStep(a, sb.ID, func(cur *sandbox.Sandbox) (store.Mutation, error) {
		if cur.Generation != sb.Generation || !runs(cur.Desired) {
			return store.Mutation{}, errNoChange
		}
		cur.Phase, cur.Reason, cur.ExitCode = sandbox.PhaseExited, reason, &code
		if final {
			return store.Mutation{SettleRequests: sandbox.OpSucceeded}, nil
		}
		return store.Mutation{}, nil
	})
	if err != nil && !errors.Is(err, errNoChange) {
		m.log.Error("record exit", "sandbox", sb.Name, "err", err)
	}
	m.log.Info("main process exited", "sandbox", sb.Name, "exit_code", code, "reason", reason)
}

// restartBackoff is the wait before the n-th restart by the restart policy.
func (m *Manager) restartBackoff(n int) time.Duration {
	d := m.cfg.RestartBase
	for i := 1; i < n && d < time.Minute; i++ {
		d *= 2
	}
	return min(d, time.Minute)
}

// remove deletes the record of a sandbox whose compute is gone.
func (m *Manager) remove(a *actor, sb *sandbox.Sandbox) {
	// Its exposed ports stop accepting before the record goes: whoever
	// sees it gone finds its addresses closed too. (Their records go with
	// the sandbox's.)
	m.forgetExposed(sb.ID)
	m.clock.forget(sb.ID)
	sctx, cancel := storeCtx()
	defer cancel()
	if err := m.cfg.Store.DeleteSandbox(sctx, sb.ID); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		m.log.Error("remove sandbox record", "sandbox", sb.Name, "err", err)
		return
	}
	a.settled = nil // the journal went with the record
	if m.cfg.Egress != nil {
		m.cfg.Egress.Forget(sb.ID)
	}
	if m.cfg.Ledger != nil {
		m.cfg.Ledger.SandboxGone(sb.ID)
	}
	m.log.Info("sandbox deleted", "sandbox", sb.Name, "id", sb.ID)
	sb.Phase = sandbox.PhaseDeleting
	m.events.publish(Event{Type: EventDeleted, Sandbox: sb})
	m.markGone(a)
}

func (m *Manager) markGone(a *actor) {
	m.mu.Lock()
	a.gone = true
	m.mu.Unlock()
}

// failed records a failed step on the sandbox and schedules the retry. Past
// the intent's deadline the phase becomes error; retries go on regardless.
func (m *Manager) failed(a *actor, sb *sandbox.Sandbox, kind string, cause error) (bool, time.Duration) {
	if m.callCtx.Err() != nil || errors.Is(cause, errClosing) {
		return false, 0 // shutting down: the journal says what happened
	}
	a.failures++
	metrics.Retry(kind)
	wait := m.backoff(a.failures)
	now := m.now()
	reason := fmt.Sprintf("%s failed (attempt %d): %v; retrying in %s", kind, a.failures, cause, wait.Round(time.Millisecond))
	_, err := m.mutateStep(a, sb.ID, func(cur *sandbox.Sandbox) (store.Mutation, error) {
		cur.Reason = reason
		switch {
		case !now.Before(cur.Deadline):
			cur.Phase = sandbox.PhaseError
			cur.Reason = fmt.Sprintf("not %s by its deadline %s: %s", cur.Desired, cur.Deadline.Format(time.RFC3339), reason)
			return store.Mutation{SettleRequests: sandbox.OpTimedOut}, nil
		case errors.Is(cause, errdefs.ErrInvalidArgument):
			// Retrying will not mend the spec: say so now, and retry
			// anyway in case the cause was outside it.
			cur.Phase = sandbox.PhaseError
			return store.Mutation{SettleRequests: sandbox.OpFailed}, nil
		}
		return store.Mutation{}, nil
	})
	if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		m.log.Error("record failure", "sandbox", sb.Name, "err", err)
	}
	m.log.Warn("sandbox step failed", "sandbox", sb.Name, "call", kind, "attempt", a.failures, "err", cause, "retry_in", wait)
	return false, wait
}

// errPreempted is returned by attempt when a delete cancelled the call.
var errPreempted = errors.New("cancelled by delete")

// errClosing is returned by attempt when the gateway began shutting down
// before the call was dispatched.
var errClosing = errors.New("the gateway is shutting down")

// attempt makes a journaled driver call (op, its pending entry) with a
// deadline, and settles the entry with the outcome in memory: it is
// written with the actor's next write, which comes before any other call
// (see actor.settled).
func (m *Manager) attempt(a *actor, op *sandbox.Operation, act action) error {
	timeout := m.callTimeout(act)
	now := m.now()
	m.mu.Lock()
	if m.closing {
		m.mu.Unlock()
		m.settle(op, sandbox.OpInterrupted, errClosing)
		return errClosing
	}
	ctx, cancelCall := context.WithTimeout(m.callCtx, timeout)
	a.inFlight, a.inFlightKind, a.preempted = cancelCall, act.kind, false
	m.mu.Unlock()

	err := m.call(ctx, act)
	metrics.DriverCall(string(act.kind), m.now().Sub(now))

	m.mu.Lock()
	preempted := a.preempted && err != nil
	a.inFlight, a.preempted = nil, false
	m.mu.Unlock()
	cancelCall()

	later := func(state sandbox.OpState, err error) {
		m.settleEntry(op, state, err)
		a.settled = append(a.settled, op)
	}
	switch {
	case err == nil:
		later(sandbox.OpSucceeded, nil)
	case preempted:
		later(sandbox.OpSuperseded, errPreempted)
		return errPreempted
	case m.callCtx.Err() != nil:
		later(sandbox.OpInterrupted, fmt.Errorf("the shutdown budget ran out: %w", err))
	case errors.Is(err, context.DeadlineExceeded):
		err = fmt.Errorf("no answer within %s: %w", timeout, err)
		later(sandbox.OpTimedOut, err)
	default:
		later(sandbox.OpFailed, err)
	}
	return err
}

// settleEntry settles a journal entry in memory.
func (m *Manager) settleEntry(op *sandbox.Operation, state sandbox.OpState, err error) {
	op.State, op.FinishedAt = state, m.now()
	if err != nil {
		op.Error = err.Error()
	}
	metrics.Settled(string(op.Kind), string(state))
}

// settle settles a journal entry and writes it.
func (m *Manager) settle(op *sandbox.Operation, state sandbox.OpState, err error) {
	m.settleEntry(op, state, err)
	m.writeSettled(op.SandboxID, []*sandbox.Operation{op})
}

// writeSettled writes settled journal entries of a sandbox.
func (m *Manager) writeSettled(id string, ops []*sandbox.Operation) {
	if len(ops) == 0 {
		return
	}
	sctx, cancel := storeCtx()
	defer cancel()
	if err := m.cfg.Store.PutOperation(sctx, ops...); err != nil {
		m.log.Error("settle journal entries", "sandbox", id, "entries", len(ops), "err", err)
	}
}

// mutateStep is mutate for an actor's step: the entries the actor settled
// and has not written yet go into the same transaction.
func (m *Manager) mutateStep(a *actor, id string, fn func(sb *sandbox.Sandbox) (store.Mutation, error)) (*sandbox.Sandbox, error) {
	sb, err := m.mutate(id, func(sb *sandbox.Sandbox) (store.Mutation, error) {
		mu, err := fn(sb)
		mu.Put = append(mu.Put, a.settled...)
		return mu, err
	})
	if err == nil {
		a.settled = nil
	}
	return sb, err
}
