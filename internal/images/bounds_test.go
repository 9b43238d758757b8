package images

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/corral-sandbox/corral/internal/errdefs"
)

// An image of more layers than corral unpacks, or with a config bigger
// than it reads, is refused with the reason before any layer is unpacked.
func TestImagesOfTooManyLayersOrABigConfigAreRefused(t *testing.T) {
	s, _ := newStore(t)
	var tars [][]byte
	for range MaxLayers + 1 {
		tars = append(tars, tarOf(t, mkfile("f", "x", 0o644)))
	}
	deep := writeLayout(t, imageOf(t, v1.Config{Cmd: []string{"sh"}}, tars...), "deep:1")
	_, err := s.Pull(context.Background(), "oci:"+deep, nil)
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "129 layers") {
		t.Errorf("an image of %d layers: %v; want it refused, naming the count", MaxLayers+1, err)
	}
	big := writeLayout(t, imageOf(t, v1.Config{Cmd: []string{"sh"}, Env: []string{"X=" + strings.Repeat("x", MaxConfigBytes)}},
		tarOf(t, mkfile("f", "x", 0o644))), "big:1")
	_, err = s.Pull(context.Background(), "oci:"+big, nil)
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "config of") {
		t.Errorf("an image with a config over %d bytes: %v; want it refused, naming its size", MaxConfigBytes, err)
	}
	if n := s.unpacked.Load(); n != 0 {
		t.Errorf("%d layers unpacked for refused images; want none", n)
	}
}

// A layer that unpacks to more than a layer may, or an image whose layers
// do together, is refused, and nothing of it stays in the cache.
func TestUnpackedBytesAreBounded(t *testing.T) {
	defer func(l, i int64) { maxLayerBytes, maxImageBytes = l, i }(maxLayerBytes, maxImageBytes)
	maxLayerBytes, maxImageBytes = 64<<10, 96<<10
	s, parent := newStore(t)
	zeros := strings.Repeat("\x00", 100<<10) // compresses to almost nothing
	bomb := writeLayout(t, imageOf(t, v1.Config{Cmd: []string{"sh"}}, tarOf(t, mkfile("zeros", zeros, 0o644))), "bomb:1")
	_, err := s.Pull(context.Background(), "oci:"+bomb, nil)
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "more than 65536 bytes") {
		t.Errorf("a layer of 100 KiB under a bound of 64 KiB: %v; want it refused", err)
	}
	half := strings.Repeat("y", 50<<10)
	wide := writeLayout(t, imageOf(t, v1.Config{Cmd: []string{"sh"}},
		tarOf(t, mkfile("a", half, 0o644)), tarOf(t, mkfile("b", half, 0o644)), tarOf(t, mkfile("c", half, 0o644))), "wide:1")
	if _, err := s.Pull(context.Background(), "oci:"+wide, nil); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("three layers of 50 KiB under an image bound of 96 KiB: %v; want it refused", err)
	}
	if left := outsideCache(t, parent); len(left) != 0 {
		t.Errorf("written outside the cache: %v", left)
	}
	if _, err := s.Get("oci:" + bomb); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("a refused image is in the cache: %v", err)
	}
}

// Past its bound, the cache lets go of the images no sandbox uses, least
// recently pulled first, until it is within the bound again.
func TestEvictKeepsTheCacheBoundedAndWhatIsUsed(t *testing.T) {
	s, _ := newStore(t)
	pull := func(name string) Image {
		dir := writeLayout(t, imageOf(t, v1.Config{Cmd: []string{"sh"}}, tarOf(t, mkfile(name, strings.Repeat(name, 40<<10), 0o644))), name+":1")
		img, err := s.Pull(context.Background(), "oci:"+dir, nil)
		if err != nil {
			t.Fatal(err)
		}
		return img
	}
	oldest, used, newest := pull("a"), pull("b"), pull("c")
	gone, err := s.Evict(50<<10, func(id string) bool { return id == used.ID })
	if err != nil {
		t.Fatal(err)
	}
	if len(gone) != 2 || gone[0].ID != oldest.ID || gone[1].ID != newest.ID {
		t.Errorf("evicted %v; want the oldest unused image, then the next, until 120 KiB fit in 50 KiB", gone)
	}
	left, _ := s.List()
	if len(left) != 1 || left[0].ID != used.ID {
		t.Errorf("left in the cache: %v; want the image in use alone", left)
	}
	if _, err := os.Stat(s.LayerPath(oldest.Layers[0])); !os.IsNotExist(err) {
		t.Errorf("an evicted image's layer: %v; want it gone from the disk", err)
	}
	if again, err := s.Evict(50<<10, func(string) bool { return true }); err != nil || len(again) != 0 {
		t.Errorf("within the bound, Evict removed %v, %v; want nothing", again, err)
	}
}
