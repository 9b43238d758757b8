//go:build corraltest

package lifecycle

import (
	"context"

	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/testbug"
)

func init() {
	if testbug.On(testbug.RetainedClaim) {
		failures.keepDeadClaims = true
		failures.claimCheck = claimPending
	}
	failures.abandonCalls = testbug.On(testbug.UnawaitedWorker)
}

// claimPending is the retained-claim failure of docs/design.md: a request is
// refused while a driver call of another instance is pending, which after a
// crash (and with recovery retaining the claim) is forever.
func claimPending(ctx context.Context, m *Manager, sb *sandbox.Sandbox) error {
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
