//go:build corraltest

package supervisor

import "github.com/corral-sandbox/corral/internal/testbug"

func init() { simulatedLandlockABI = testbug.LandlockABI }
