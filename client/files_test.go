package client

import "testing"

// A remote path's top entry in a copy's tar stream is its base name, or
// nothing for what a directory holds (DIR/.) and for the root.
func TestRemoteBase(t *testing.T) {
	for p, want := range map[string]string{"/sandbox/dir": "dir", "/sandbox/dir/": "dir", "/sandbox/dir/.": "", "/": ""} {
		if got := remoteBase(p); got != want {
			t.Errorf("remoteBase(%q) = %q, want %q", p, got, want)
		}
	}
}
