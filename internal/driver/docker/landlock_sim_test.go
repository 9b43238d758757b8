package docker

import (
	"strconv"
	"testing"

	"github.com/corral-sandbox/corral/internal/testbug"
)

// simulateLandlockABI gives the sandboxes a test starts a kernel whose
// Landlock ABI is abi (0: none), as the test build of corral that runs their
// supervisors sees it.
func simulateLandlockABI(t *testing.T, abi int) {
	extraEnv = []string{testbug.LandlockABIEnv + "=" + strconv.Itoa(abi)}
	t.Cleanup(func() { extraEnv = nil })
}
