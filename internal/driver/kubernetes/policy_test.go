package kubernetes

import (
	"strings"
	"testing"

	"github.com/corral-sandbox/corral/internal/policy"
)

// What a policy asks that the driver cannot enforce is named; a default
// policy asks nothing of the kind.
func TestUnenforcedNamesWhatKubernetesCannotDo(t *testing.T) {
	if got := Unenforced(policy.Default()); got != nil {
		t.Errorf("default policy: %q; want nothing", got)
	}
	p, err := policy.Parse("version: 1\nisolation: gvisor\nlimits:\n  pids: 64\nlifecycle:\n  idle_timeout: 5m\n")
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(Unenforced(p), "\n")
	for _, want := range []string{"limits.pids", "on_idle", "gvisor_runtime_class"} {
		if !strings.Contains(got, want) {
			t.Errorf("%q says nothing of %s", got, want)
		}
	}
}
