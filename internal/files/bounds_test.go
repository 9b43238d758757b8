package files

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/safetar"
)

// chain makes dir/tree and a chain of n directories named d in it, with a
// file at its end, a level at a time (its paths pass PATH_MAX).
func chain(t *testing.T, dir string, n int) {
	t.Helper()
	if err := os.Mkdir(filepath.Join(dir, "tree"), 0o755); err != nil {
		t.Fatal(err)
	}
	r, err := os.OpenRoot(filepath.Join(dir, "tree"))
	if err != nil {
		t.Fatal(err)
	}
	for range n {
		if err := r.Mkdir("d", 0o755); err != nil {
			t.Fatal(err)
		}
		next, err := r.OpenRoot("d")
		r.Close()
		if err != nil {
			t.Fatal(err)
		}
		r = next
	}
	defer r.Close()
	if err := r.WriteFile("leaf", []byte("leaf"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// A chain of directories as deep as a copy into a sandbox takes is copied
// out whole; a deeper one (12,000 levels made the walk quadratic) is
// refused with the reason once the walk reaches the bound.
func TestCopyOutOfDeepTrees(t *testing.T) {
	fsys, dir, _ := sandboxFS(t)
	depth := safetar.DefaultLimits.Depth - 2 // tree/d/.../d/leaf within the bound
	chain(t, dir, depth)
	var out bytes.Buffer
	if err := fsys.Do(context.Background(), Request{Op: OpCopyOut, Path: "/sandbox/tree"}, nil, &out); err != nil {
		t.Fatalf("copy out of a tree %d levels deep: %v", depth, err)
	}
	tr, entries := tar.NewReader(&out), 0
	for ; ; entries++ {
		if _, err := tr.Next(); err != nil {
			break
		}
	}
	if entries != depth+2 {
		t.Errorf("%d entries for %d directories and a file", entries, depth+1)
	}

	fsys2, dir2, _ := sandboxFS(t)
	chain(t, dir2, 3000)
	err := fsys2.Do(context.Background(), Request{Op: OpCopyOut, Path: "/sandbox/tree"}, nil, &bytes.Buffer{})
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "levels deep") {
		t.Errorf("copy out of a tree 3,000 levels deep: %v; want it refused, saying how deep it may be", err)
	}
}

// A file of zeros (a sparse file, as a tar stream carries it) is copied
// in sparse: its blocks on disk are those of its data, not its size.
func TestCopyInKeepsHoles(t *testing.T) {
	fsys, dir, _ := sandboxFS(t)
	body := make([]byte, 64<<20)
	copy(body[32<<20:], "data in the middle")
	stream := tarOf(t, entry{name: "sparse", body: string(body), typ: tar.TypeReg})
	if err := fsys.Do(context.Background(), Request{Op: OpCopyIn, Path: "/sandbox"}, bytes.NewReader(stream), &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "sparse"))
	if err != nil || !bytes.Equal(data, body) {
		t.Fatalf("the file copied in differs from what was sent (%d bytes, %v)", len(data), err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(dir, "sparse"), &st); err != nil {
		t.Fatal(err)
	}
	if used := st.Blocks * 512; used > 4<<20 {
		t.Errorf("a 64 MiB file of zeros but 18 bytes takes %d bytes on disk; want it sparse", used)
	}
}
