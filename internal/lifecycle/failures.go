package lifecycle

import (
	"context"

	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

// Failures are failures docs/design.md was written from, which a test
// build re-introduces (Config.Failures, set by the gateway of a corraltest
// build) so that the torture harness can show it catches each one. The
// zero value re-introduces none: what every other build runs.
type Failures struct {
	// RetainedClaim: recovery and shutdown leave the entries that dead
	// instances left pending as they are, and a request is refused while
	// another instance's driver call is pending.
	RetainedClaim bool
	// UnawaitedWorker: shutdown neither waits for the driver calls in
	// flight nor settles their entries.
	UnawaitedWorker bool
}

// claimPending is the retained-claim failure: a request is refused while
// a driver call of another instance is pending, which after a crash (and
// with recovery retaining the claim) is forever.
func (m *Manager) claimPending(ctx context.Context, nameOrID string) error {
	sb, err := m.Get(ctx, nameOrID)
	if err != nil {
		return err
	}
	ops, err := m.cfg.Store.ListOperations(ctx, sb.ID)
	if err != nil {
		return err
	}
	for _, op := range ops {
		if !op.Kind.IsRequest() && op.State == sandbox.OpPending && op.Owner != m.cfg.Instance {
			return errdefs.FailedPrecondition("sandbox %q: previous driver operation is still pending", sb.Name)
		}
	}
	return nil
}
