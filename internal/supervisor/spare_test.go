package supervisor

import (
	"os"
	"strings"
	"testing"
)

// A spare runs nothing in a root other than the one its request names:
// one that a pivot_root did not move (its root still the host's) refuses.
func TestSpareRefusesAnotherRoot(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	root, err := rootOf("/")
	if err != nil {
		t.Fatal(err)
	}
	other, err := rootOf(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := enter(spareRequest{Dir: os.TempDir(), Root: other}); err == nil || !strings.Contains(err.Error(), "is not the sandbox's") {
		t.Errorf("a request naming another root: %v; want it refused", err)
	}
	if now, _ := os.Getwd(); now != wd {
		t.Errorf("a refused request moved the process to %s", now)
	}
	if err := enter(spareRequest{Dir: wd, Root: root}); err != nil {
		t.Errorf("a request naming its own root: %v", err)
	}
}
