// Package testbug re-introduces, when CORRAL_TEST_REINTRODUCE names them,
// the failures DESIGN.md was written from, so that the torture harness can
// show it catches each one. It is a test switch: never set it otherwise.
//
//	late-signal-handler  SIGTERM/SIGINT handling installed after recovery
//	unawaited-worker     shutdown neither waits for driver calls in flight
//	                     nor settles their journal entries
//	retained-claim       recovery keeps a dead instance's pending entries,
//	                     and a pending driver call blocks every request
package testbug

import (
	"os"
	"slices"
	"strings"
)

var enabled = strings.Split(os.Getenv("CORRAL_TEST_REINTRODUCE"), ",")

// On reports whether the named failure is re-introduced.
func On(name string) bool { return slices.Contains(enabled, name) }
