// Package testbug holds the test switches: the failures docs/design.md was
// written from, which the torture harness re-introduces to show it catches
// each one, and a simulated kernel without Landlock. They exist only in a
// binary built with the test tag (go build -tags corraltest); this file,
// the names that tests use to set them, is all a build without the tag has
// of the package, and nothing in a release binary imports it.
//
// A package that has a switch keeps it as a hook that a file of its own
// with the tag sets (failures_corraltest.go), so that the production code
// never reads the environment for it:
//
//	late-signal-handler  SIGTERM/SIGINT handling installed after recovery
//	                     (internal/earlysignal)
//	unawaited-worker     shutdown neither waits for driver calls in flight
//	                     nor settles their journal entries (internal/lifecycle)
//	retained-claim       recovery keeps a dead instance's pending entries,
//	                     and a pending driver call blocks every request
//	                     (internal/lifecycle)
//	unleased             replicas on one store take neither its lease nor
//	                     the home's lock: each one leads (internal/gateway)
//	LandlockABIEnv       the kernel's Landlock ABI, as the exec stage sees it
//	                     (internal/supervisor)
package testbug

// Tag is the build tag of test builds, the only ones with the switches.
const Tag = "corraltest"

// ReintroduceEnv names, comma-separated, the failures a test build
// re-introduces.
const ReintroduceEnv = "CORRAL_TEST_REINTRODUCE"

// The failures that ReintroduceEnv can name.
const (
	LateSignalHandler = "late-signal-handler"
	UnawaitedWorker   = "unawaited-worker"
	RetainedClaim     = "retained-claim"
	Unleased          = "unleased"
)

// LandlockABIEnv, when set (to a number) for a test build's exec stage, is
// taken as the kernel's Landlock ABI instead of asking the kernel: tests
// simulate a kernel without Landlock with 0.
const LandlockABIEnv = "CORRAL_TEST_LANDLOCK_ABI"
