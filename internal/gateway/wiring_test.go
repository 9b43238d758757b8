package gateway

import (
	"os/exec"
	"strings"
	"testing"
)

// Only the wiring builds concrete drivers and stores: every other package
// of the module (tests aside) knows the driver and store interfaces alone.
// bench wires its own gateway core for benchmarks; a driver's own
// subpackages (the fake's faults) belong to it, and the stores' packages
// build on one another (sqlstore under sqlite and postgres; stores and
// migrate over both).
func TestOnlyTheWiringImportsDriversAndStores(t *testing.T) {
	const mod = "github.com/corral-sandbox/corral/"
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, mod+"...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	concrete := func(pkg string) bool {
		rest, ok := strings.CutPrefix(pkg, mod+"internal/")
		if !ok {
			return false
		}
		switch rest {
		case "driver/docker", "driver/native", "driver/fake":
			return true
		}
		return strings.HasPrefix(rest, "store/")
	}
	wiring := map[string]bool{mod + "internal/gateway": true, mod + "bench": true}
	seen := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg := fields[0]
		for _, imp := range fields[1:] {
			if !concrete(imp) || strings.HasPrefix(pkg, imp+"/") || concrete(pkg) {
				continue
			}
			if pkg == mod+"internal/gateway" {
				seen++
			}
			if !wiring[pkg] {
				t.Errorf("%s imports %s; only the wiring (internal/gateway) may", pkg, imp)
			}
		}
	}
	if seen < 4 { // docker, native, fake, sqlite: the check itself works
		t.Errorf("internal/gateway imports %d concrete drivers and stores, want 4", seen)
	}
}
