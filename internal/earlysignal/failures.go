//go:build !corraltest

package earlysignal

// lateHandler is the late-signal-handler failure of docs/design.md, which only a
// test build (failures_corraltest.go) can re-introduce.
const lateHandler = false
