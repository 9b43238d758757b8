// Package chaos is the torture harness: it runs a real gateway binary as a
// child, drives random lifecycle requests at it from concurrent clients
// (some of which give up mid-call), makes driver calls hang, fail or slow
// down, kills the gateway with SIGKILL or SIGTERM at random instants —
// during startup recovery and during shutdown too — restarts it, and then
// checks the lifecycle invariants from the API, the driver's own state and
// the store. Runs are seeded, so a failure replays with -seed N. The
// gateway it runs is built by testenv.BuildCorral with the corraltest tag,
// whose test switches (internal/testbug) let TestHarnessCatchesTheFailuresOfDesign
// re-introduce docs/design.md's failures; a release build has none.
//
//	go test ./chaos -run Torture                      # CI smoke
//	go test ./chaos -run Torture -seeds 20 -kills 100 -timeout 2h   # 2,000 kill points
//	go test ./chaos -run Torture -seed 7 -v           # replay one seed
package chaos
