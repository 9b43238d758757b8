//go:build !corraltest

package gateway

import "github.com/corral-sandbox/corral/internal/driver/fake"

// fakeFaults is no fault injection: a release build's fake driver runs
// every call as asked (fakefaults_corraltest.go has the test build's).
func fakeFaults(string) fake.Faults { return nil }
