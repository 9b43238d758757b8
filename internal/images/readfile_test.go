package images

import (
	"context"
	"errors"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/testenv"
)

// ReadFile reads the merged tree as overlayfs will show it: the top layer
// first, whiteouts and opaque directories hiding what is below, symlinks
// followed inside the tree (absolute ones and ".." from its root).
func TestReadFileMergesTheLayers(t *testing.T) {
	testenv.RequireRoot(t)
	s, _ := newStore(t)
	bottom := tarOf(t,
		mkfile("etc/passwd", passwd0, 0o644), mkfile("lib/x", "lower lib\n", 0o644), mkfile("usr/lib/x", "usr lib\n", 0o644),
		mkfile("opq/a", "a\n", 0o644), mkfile("gone", "gone\n", 0o644), mkfile("data", "a file\n", 0o644),
		mkfile("dir/keep", "keep\n", 0o644),
	)
	middle := tarOf(t,
		mkfile(".wh.gone", "", 0), mkdir("opq/"), mkfile("opq/.wh..wh..opq", "", 0), mkfile("opq/b", "b\n", 0o644),
		mksym("lib", "usr/lib"), mkfile("etc/passwd", passwd1, 0o644), mksym("abs", "/etc/passwd"),
		mksym("up", "../../../etc/passwd"), mksym("loop1", "loop2"), mksym("loop2", "loop1"),
		mkdir("dir/"), mkfile("dir/new", "new\n", 0o644), mksym("dir/rel", "../lib/x"),
	)
	top := tarOf(t, mkdir("data/"), mkfile("data/inner", "inner\n", 0o644))
	img, err := s.Pull(context.Background(), "oci:"+writeLayout(t, imageOf(t, v1.Config{}, bottom, middle, top), "v1"), nil)
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		"/etc/passwd": passwd1, "etc/passwd": passwd1, "/abs": passwd1, "/up": passwd1,
		"/lib/x": "usr lib\n", "/opq/b": "b\n", "/dir/keep": "keep\n", "/dir/new": "new\n",
		"/dir/rel": "usr lib\n", "/data/inner": "inner\n", "/dir/../etc/./passwd": passwd1,
	} {
		got, err := s.ReadFile(img, path)
		if err != nil || string(got) != want {
			t.Errorf("%s: %q, %v; want %q", path, got, err, want)
		}
	}
	for _, path := range []string{"/gone", "/opq/a", "/missing", "/data/../gone"} {
		if got, err := s.ReadFile(img, path); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("%s: %q, %v; want not found", path, got, err)
		}
	}
	for path, want := range map[string]error{"/loop1": unix.ELOOP, "/etc/passwd/x": unix.ENOTDIR, "/dir": errdefs.ErrInvalidArgument} {
		if got, err := s.ReadFile(img, path); !errors.Is(err, want) {
			t.Errorf("%s: %q, %v; want %v", path, got, err, want)
		}
	}
}
