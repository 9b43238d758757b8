package lifecycle

import (
	"context"

	"github.com/corral-sandbox/corral/internal/sandbox"
)

// failures are the hooks through which a test build re-introduces failures
// docs/design.md was written from, so that the torture harness can show it
// catches each one. Only failures_corraltest.go (build tag corraltest) sets
// them; in any other build they stay zero and what they guard never runs.
var failures struct {
	// keepDeadClaims: recovery and shutdown leave the entries that dead
	// instances left pending as they are (retained-claim).
	keepDeadClaims bool
	// claimCheck, when set, is asked before a request changes a record,
	// and refuses it while another instance's driver call is pending
	// (retained-claim).
	claimCheck func(ctx context.Context, m *Manager, sb *sandbox.Sandbox) error
	// abandonCalls: shutdown neither waits for the driver calls in flight
	// nor settles their entries (unawaited-worker).
	abandonCalls bool
}
