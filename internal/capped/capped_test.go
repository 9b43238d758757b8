package capped

import (
	"fmt"
	"testing"
)

func TestKeepsTheFirstBytesAndSaysItCut(t *testing.T) {
	b := New(5)
	for _, s := range []string{"abc", "de", ""} {
		if n, err := fmt.Fprint(b, s); n != len(s) || err != nil {
			t.Fatalf("write %q: %d, %v", s, n, err)
		}
	}
	if b.String() != "abcde" || b.Cut {
		t.Fatalf("after 5 bytes: %q, cut %v; want all, nothing cut", b.String(), b.Cut)
	}
	if n, err := fmt.Fprint(b, "fgh"); n != 3 || err != nil {
		t.Fatalf("a write past the cap: %d, %v; want it taken whole", n, err)
	}
	if b.String() != "abcde" || !b.Cut {
		t.Errorf("past the cap: %q, cut %v; want the first 5 bytes, cut", b.String(), b.Cut)
	}
}
