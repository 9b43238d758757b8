//go:build !corraltest

package gateway

import (
	"github.com/corral-sandbox/corral/internal/driver/fake"
	"github.com/corral-sandbox/corral/internal/lifecycle"
)

// What a test build (testbuild_corraltest.go) injects, none of which a
// release build has: the fake driver runs every call as asked, and the
// lifecycle re-introduces no failure.

func fakeFaults(string) fake.Faults { return nil }

func reintroduced() lifecycle.Failures { return lifecycle.Failures{} }

// unleased is false: every replica takes the store's lease.
const unleased = false
