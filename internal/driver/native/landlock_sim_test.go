package native

import (
	"strconv"

	"github.com/corral-sandbox/corral/internal/testbug"
)

// simulatedLandlockEnv gives the sandboxes of a driver a kernel whose
// Landlock ABI is abi (0: none), as the test build of corral that runs
// their supervisors sees it (Options.Env).
func simulatedLandlockEnv(abi int) []string {
	return []string{testbug.LandlockABIEnv + "=" + strconv.Itoa(abi)}
}
