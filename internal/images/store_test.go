package images

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/corral-sandbox/corral/internal/errdefs"
)

// present says which of layers have a directory in the cache.
func present(s *Store, layers ...string) []bool {
	out := make([]bool, len(layers))
	for i, l := range layers {
		_, err := os.Stat(s.LayerPath(l))
		out[i] = err == nil
	}
	return out
}

// Remove and Prune take only images not in use, and the layers no
// remaining image has; a layer shared with a kept image stays.
func TestRemoveAndPrune(t *testing.T) {
	s, _ := newStore(t)
	shared, onlyA, onlyB, onlyC := tarOf(t, mkfile("shared", "s", 0o644)), tarOf(t, mkfile("a", "a", 0o644)),
		tarOf(t, mkfile("b", "b", 0o644)), tarOf(t, mkfile("c", "c", 0o644))
	pull := func(ref string, tars ...[]byte) Image {
		t.Helper()
		img, err := s.Pull(context.Background(), "oci:"+writeLayout(t, imageOf(t, richConfig, tars...), ref)+":"+ref, nil)
		if err != nil {
			t.Fatal(err)
		}
		return img
	}
	a, b := pull("a", shared, onlyA), pull("b", shared, onlyB)
	L, LA, LB := a.Layers[0], a.Layers[1], b.Layers[1]
	inUse := func(ids ...string) func(string) bool {
		return func(id string) bool {
			for _, u := range ids {
				if id == u {
					return true
				}
			}
			return false
		}
	}

	if _, err := s.Remove(a.Refs[0], inUse(a.ID)); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), a.Refs[0]) {
		t.Fatalf("remove of an image in use: %v", err)
	}
	gone, err := s.Remove(a.ID, inUse(b.ID))
	if err != nil || gone.ID != a.ID {
		t.Fatalf("remove: %+v, %v", gone, err)
	}
	if got := present(s, L, LA, LB); got[0] != true || got[1] != false || got[2] != true {
		t.Errorf("after removing a, layers shared, a's, b's present: %v; want true, false, true", got)
	}
	if _, err := s.Get(a.Refs[0]); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("a removed is still found: %v", err)
	}

	c := pull("c", onlyC)
	orphan := filepath.Join(s.dir, "layers", "sha256", strings.Repeat("0", 64))
	leftover := filepath.Join(s.tmpDir(), "layer-123")
	for _, d := range []string{orphan, leftover} {
		if err := os.MkdirAll(filepath.Join(d, "sub"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	pruned, err := s.Prune(inUse(b.ID))
	if err != nil || len(pruned) != 1 || pruned[0].ID != c.ID {
		t.Fatalf("prune with b in use: %+v, %v; want c alone", pruned, err)
	}
	if got := present(s, L, LB, c.Layers[0]); got[0] != true || got[1] != true || got[2] != false {
		t.Errorf("after the prune, layers shared, b's, c's present: %v; want true, true, false", got)
	}
	for _, d := range []string{orphan, leftover} {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s survived the prune: %v", d, err)
		}
	}

	// What is recorded survives a reopen; a leftover in tmp does not.
	if err := os.Mkdir(leftover, 0o755); err != nil {
		t.Fatal(err)
	}
	again, err := Open(s.dir, Options{NoEngine: true})
	if err != nil {
		t.Fatal(err)
	}
	if list, _ := again.List(); len(list) != 1 || list[0].ID != b.ID || list[0].Size != b.Size {
		t.Errorf("reopened, the cache lists %+v; want b alone", list)
	}
	if _, err := os.Stat(leftover); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Open left %s: %v", leftover, err)
	}
	if pruned, err := again.Prune(nil); err != nil || len(pruned) != 1 {
		t.Errorf("prune of all: %+v, %v", pruned, err)
	}
	if entries, _ := os.ReadDir(filepath.Join(s.dir, "layers", "sha256")); len(entries) != 0 {
		t.Errorf("layers left after pruning everything: %v", entries)
	}
}

// A tag pulled again with Always after it moved names the new image only;
// without Always the cache answers with the image it has.
func TestMovedTag(t *testing.T) {
	s, _ := newStore(t)
	first := imageOf(t, richConfig, tarOf(t, mkfile("v", "1", 0o644)))
	ref := push(t, first, "moving/tag:latest")
	old, err := s.Pull(context.Background(), ref, nil)
	if err != nil {
		t.Fatal(err)
	}
	push(t, imageOf(t, richConfig, tarOf(t, mkfile("v", "2", 0o644))), "moving/tag:latest")
	if cached, err := s.Pull(context.Background(), ref, nil); err != nil || cached.ID != old.ID {
		t.Fatalf("pull without Always: %s, %v; want the cached %s", cached.ID, err, old.ID)
	}
	moved, err := s.Pull(context.Background(), ref, nil, PullOptions{Always: true})
	if err != nil || moved.ID == old.ID {
		t.Fatalf("pull with Always: %s, %v; want a new image", moved.ID, err)
	}
	if got, err := s.Get(ref); err != nil || got.ID != moved.ID {
		t.Errorf("the tag names %s, %v; want %s", got.ID, err, moved.ID)
	}
	if got, err := s.Get(old.ID); err != nil || len(got.Refs) != 0 {
		t.Errorf("the old image: %+v, %v; want it kept, with no name", got, err)
	}
}
