package cli

import (
	"bytes"
	"strings"
	"testing"
)

// Either side of cp is NAME:PATH or local, as docker cp reads them.
func TestSplitRemote(t *testing.T) {
	for _, c := range []struct {
		arg, name, path string
		remote          bool
	}{
		{"box:/sandbox/x", "box", "/sandbox/x", true},
		{"box:out", "box", "/sandbox/out", true}, // relative: under the workdir
		{"./a:b", "", "./a:b", false},            // a local name with a colon
		{"/abs/path", "", "/abs/path", false},
		{":x", "", ":x", false},
		{"-", "", "-", false},
	} {
		name, p, remote := splitRemote(c.arg)
		if name != c.name || p != c.path || remote != c.remote {
			t.Errorf("splitRemote(%q) = %q %q %v, want %q %q %v", c.arg, name, p, remote, c.name, c.path, c.remote)
		}
	}
}

// Off a terminal the progress shows nothing, and counts what is read.
func TestCopyProgressOffTerminal(t *testing.T) {
	var out bytes.Buffer
	p := newCopyProgress(&out, "box:/sandbox/x")
	var got bytes.Buffer
	got.ReadFrom(p.reader(strings.NewReader("0123456789")))
	p.done = true
	p.finish()
	if out.Len() != 0 || p.current.Load() != 10 || got.String() != "0123456789" {
		t.Errorf("progress wrote %q, counted %d, passed %q", out.String(), p.current.Load(), got.String())
	}
}
