//go:build corraltest

package gateway

import (
	"github.com/corral-sandbox/corral/internal/driver/fake"
	"github.com/corral-sandbox/corral/internal/driver/fake/faults"
)

// fakeFaults is the fault rules of the fake driver's state directory: in a
// test build, tests hold, delay or fail its calls from outside the gateway.
func fakeFaults(stateDir string) fake.Faults { return faults.File(stateDir) }
