//go:build corraltest

package gateway

import (
	"github.com/corral-sandbox/corral/internal/driver/fake"
	"github.com/corral-sandbox/corral/internal/driver/fake/faults"
	"github.com/corral-sandbox/corral/internal/lifecycle"
	"github.com/corral-sandbox/corral/internal/testbug"
)

// fakeFaults is the fault rules of the fake driver's state directory: in a
// test build, tests hold, delay or fail its calls from outside the gateway.
func fakeFaults(stateDir string) fake.Faults { return faults.File(stateDir) }

// reintroduced is the failures of docs/design.md that the torture harness
// asked this test build's gateway to re-introduce (testbug).
func reintroduced() lifecycle.Failures {
	return lifecycle.Failures{
		RetainedClaim:   testbug.On(testbug.RetainedClaim),
		UnawaitedWorker: testbug.On(testbug.UnawaitedWorker),
	}
}

// unleased: replicas on a shared store take neither its lease nor the
// home's lock, so that every one of them leads (testbug.Unleased).
var unleased = testbug.On(testbug.Unleased)
