package egress

import (
	"context"
	"testing"
)

// A sandbox renamed (a claimed pool member) has its decisions under the
// new name once Refresh has read its record again.
func TestRefreshTakesTheNewName(t *testing.T) {
	name := "pool-1a2b3c4d"
	s := &Sandboxes{Dir: t.TempDir(), Lookup: func(context.Context, string) (Network, error) {
		return Network{Name: name}, nil
	}}
	b, err := s.box(context.Background(), "id1")
	if err != nil {
		t.Fatal(err)
	}
	s.record(b, Decision{Host: "a.test", Verdict: Denied})
	name = "job1"
	s.Refresh("id1")
	s.record(b, Decision{Host: "b.test", Verdict: Denied})
	past, _, stop := s.Denials("id1", false)
	defer stop()
	if len(past) != 2 || past[0].Sandbox != "pool-1a2b3c4d" || past[1].Sandbox != "job1" {
		t.Fatalf("decisions: %+v; want the member's name, then the claimed one", past)
	}
}
