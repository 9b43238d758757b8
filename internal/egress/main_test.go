package egress

import (
	"testing"

	"go.uber.org/goleak"
)

// No tunnel, request or connection outlives its proxy.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
