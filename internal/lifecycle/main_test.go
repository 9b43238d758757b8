package lifecycle

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any test leaves a goroutine behind: every
// actor must have ended once its manager has shut down.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
