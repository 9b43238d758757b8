package shim

import (
	"os"
	"slices"
	"strings"
	"testing"
)

// A handed-off standby shows the command line of a supervisor started for
// its sandbox, in the room its own left; os.Args keeps its values (in new
// memory: a string that still points into the old is rewritten too).
func TestRetitle(t *testing.T) {
	args := make([]string, len(os.Args)) // copies: the originals' bytes are the ones rewritten
	for i, a := range os.Args {
		args[i] = strings.Clone(a)
	}
	want := []string{"corral-supervise", "supervise", "sandbox", "/b"}
	if len(strings.Join(want, "\x00")) > len(strings.Join(os.Args, "\x00")) {
		t.Skip("this test binary's command line is too short to hold the title")
	}
	retitle(want)
	data, err := os.ReadFile("/proc/self/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimRight(string(data), "\x00"); got != strings.Join(want, "\x00") {
		t.Errorf("command line %q; want %q", got, strings.Join(want, "\x00"))
	}
	if !slices.Equal(os.Args, args) {
		t.Errorf("os.Args became %q; want %q", os.Args, args)
	}
	retitle([]string{strings.Repeat("x", 1<<16)}) // no room: nothing changes
	if again, _ := os.ReadFile("/proc/self/cmdline"); string(again) != string(data) {
		t.Errorf("a title longer than the room changed the command line to %q", again)
	}
}

// A handoff whose sender died after the descriptors (no path), or that
// names no clean absolute path, is not run.
func TestHandedBundle(t *testing.T) {
	for _, tc := range []struct {
		msg   string
		files int
		ok    bool
	}{
		{"/var/lib/corral/native/sandboxes/abc/gen-1", 3, true},
		{"", 3, false},
		{"config", 3, false},
		{"/a/../b", 3, false},
		{"/a/b", 2, false},
	} {
		dir, err := handedBundle([]byte(tc.msg), tc.files)
		if (err == nil) != tc.ok || (tc.ok && dir != tc.msg) {
			t.Errorf("handoff of %q with %d descriptors: %q, %v; want ok %v", tc.msg, tc.files, dir, err, tc.ok)
		}
	}
}
