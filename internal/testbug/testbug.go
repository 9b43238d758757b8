//go:build corraltest

package testbug

import (
	"os"
	"slices"
	"strconv"
	"strings"
)

var enabled = strings.Split(os.Getenv(ReintroduceEnv), ",")

// On reports whether the named failure is re-introduced.
func On(name string) bool { return slices.Contains(enabled, name) }

// LandlockABI returns the simulated kernel's Landlock ABI, if a test set
// one.
func LandlockABI() (int, bool) {
	v, ok := os.LookupEnv(LandlockABIEnv)
	if !ok {
		return 0, false
	}
	n, _ := strconv.Atoi(v)
	return n, true
}
