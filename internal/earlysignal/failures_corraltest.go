//go:build corraltest

package earlysignal

import "github.com/corral-sandbox/corral/internal/testbug"

// lateHandler re-introduces, for the torture harness, the late-signal-handler
// failure of docs/design.md: nothing is subscribed here, and the gateway installs
// its handler only after recovery. A package variable, so it is set before
// this package's init reads it.
var lateHandler = testbug.On(testbug.LateSignalHandler)
