package cli

import (
	"slices"
	"testing"
)

func TestParseForwards(t *testing.T) {
	got, err := parseForwards([]string{"8080", "9000:80", ":443", "0:22"})
	want := []forward{{0, 8080}, {9000, 80}, {0, 443}, {0, 22}}
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("parseForwards = %v, %v; want %v", got, err, want)
	}
	for _, bad := range []string{"", "0", "http", "8080:", "1:2:3", "70000", "-1:80", "80:70000"} {
		if got, err := parseForwards([]string{bad}); err == nil {
			t.Errorf("parseForwards(%q) = %v, want an error", bad, got)
		}
	}
}
