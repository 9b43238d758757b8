package images

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/corral-sandbox/corral/internal/errdefs"
)

// pullRefused pulls an image of one layer from an OCI layout (edited by
// edit, if not nil) and checks that the pull is refused with an error that
// names the layer and says each of says; that nothing was written outside
// the cache; and that the cache holds no trace of it.
func pullRefused(t *testing.T, layerTar func(parent string) []byte, edit func(m *v1.Manifest, cfg map[string]any, blobs map[string][]byte), says ...string) {
	t.Helper()
	s, parent := newStore(t)
	img := imageOf(t, v1.Config{}, layerTar(parent))
	dir := writeLayout(t, img, "bad")
	if edit != nil {
		editLayout(t, dir, edit)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	digest, err := layers[0].Digest()
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Pull(context.Background(), "oci:"+dir, nil)
	if !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("pull: %v, want a refusal (invalid argument)", err)
	}
	t.Log(err)
	for _, say := range append(says, "oci:"+dir) {
		if !strings.Contains(err.Error(), say) {
			t.Errorf("%q does not say %q", err, say)
		}
	}
	if edit == nil && !strings.Contains(err.Error(), digest.String()) {
		t.Errorf("%q does not name the layer %s", err, digest)
	}
	if stray := outsideCache(t, parent); len(stray) != 0 {
		t.Errorf("the pull wrote outside the cache: %v", stray)
	}
	if entries, _ := os.ReadDir(s.tmpDir()); len(entries) != 0 {
		t.Errorf("the refused layer was left in %s: %v", s.tmpDir(), entries)
	}
	if entries, _ := os.ReadDir(filepath.Join(s.dir, "layers", "sha256")); len(entries) != 0 {
		t.Errorf("a refused layer is in the cache: %v", entries)
	}
	if list, _ := s.List(); len(list) != 0 {
		t.Errorf("a refused image is in the cache: %+v", list)
	}
}

// Entries that would land outside their layer are refused, with the
// entry's name and why.
func TestMaliciousEntriesAreRefused(t *testing.T) {
	deep := strings.Repeat("d/", 300) + "f"
	long := strings.Repeat("n", 5000)
	for _, c := range []struct {
		name    string
		entries func(parent string) []ent
		says    []string
	}{
		{"dot-dot", func(string) []ent { return []ent{mkfile("../evil", "x", 0o644)} }, []string{`"../evil"`, `".." component`}},
		{"dot-dot inside", func(string) []ent { return []ent{mkdir("a/"), mkfile("a/../../evil", "x", 0o644)} }, []string{`"a/../../evil"`, `".."`}},
		{"absolute", func(string) []ent { return []ent{mkfile("/evil", "x", 0o644)} }, []string{`"/evil"`, "absolute name"}},
		{"through an absolute symlink", func(parent string) []ent {
			return []ent{mksym("etc", filepath.Join(parent, "sentinel")), mkfile("etc/passwd", "evil\n", 0o644)}
		}, []string{`"etc/passwd"`, "symlink that leads outside the layer"}},
		{"through a relative symlink", func(string) []ent {
			return []ent{mksym("x", "../../.."), mkfile("x/evil", "evil\n", 0o644)}
		}, []string{`"x/evil"`, "symlink that leads outside the layer"}},
		{"directory through a symlink", func(string) []ent {
			return []ent{mksym("x", "../../../sentinel"), mkdir("x/sub/")}
		}, []string{`"x/sub/"`, "symlink that leads outside the layer"}},
		{"hard link up", func(string) []ent { return []ent{mklink("l", "../../outside")} }, []string{`"l"`, `hard link target "../../outside"`, `".."`}},
		{"hard link absolute", func(string) []ent { return []ent{mklink("l", "/etc/passwd")} }, []string{`"l"`, `"/etc/passwd"`, "absolute"}},
		{"hard link through a symlink", func(string) []ent {
			return []ent{mksym("d", "/etc"), mklink("l", "d/passwd")}
		}, []string{`"l"`, "symlink that leads outside the layer"}},
		{"hard link to nothing", func(string) []ent { return []ent{mklink("l", "missing")} }, []string{`"l"`, "not in the layer"}},
		{"too deep", func(string) []ent { return []ent{mkfile(deep, "x", 0o644)} }, []string{"301 levels deep, over the limit of 256"}},
		{"too long", func(string) []ent { return []ent{mkfile(long, "x", 0o644)} }, []string{"5000 bytes long, over the limit of 4096"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			pullRefused(t, func(parent string) []byte { return tarOf(t, c.entries(parent)...) }, nil, c.says...)
		})
	}
}

// A later entry replaces a symlink itself, never what it points to.
func TestEntryReplacesASymlinkNotItsTarget(t *testing.T) {
	s, parent := newStore(t)
	target := filepath.Join(parent, "sentinel", "file")
	img := imageOf(t, v1.Config{}, tarOf(t, mksym("f", target), mkfile("f", "inside\n", 0o644),
		mksym("g", "../../../sentinel/file"), mklink("g", "f")))
	got, err := s.Pull(context.Background(), "oci:"+writeLayout(t, img, "v1"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if stray := outsideCache(t, parent); len(stray) != 0 {
		t.Errorf("the pull wrote outside the cache: %v", stray)
	}
	for _, name := range []string{"f", "g"} {
		p := filepath.Join(s.LayerPath(got.Layers[0]), name)
		if data, err := os.ReadFile(p); err != nil || string(data) != "inside\n" {
			t.Errorf("%s: %q, %v", p, data, err)
		}
	}
}

// A layer whose bytes disagree with what its image declares is refused:
// a size, a digest or a diff id that lies, and a truncated gzip stream.
func TestLyingLayersAreRefused(t *testing.T) {
	layerTar := tarOf(t, mkfile("a", strings.Repeat("content ", 1000), 0o644))
	layer := func(string) []byte { return layerTar }
	blobOf := func(t *testing.T, m *v1.Manifest) []byte {
		l := layerOf(t, layerTar)
		rc, err := l.Compressed()
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		b, err := io.ReadAll(rc)
		if err != nil {
			t.Fatal(err)
		}
		if sha(b) != m.Layers[0].Digest.String() {
			t.Fatalf("the layer's blob is not %s", m.Layers[0].Digest)
		}
		return b
	}
	other := v1.Hash{Algorithm: "sha256", Hex: sha([]byte("other"))[7:]}
	t.Run("size", func(t *testing.T) {
		pullRefused(t, layer, func(m *v1.Manifest, _ map[string]any, _ map[string][]byte) {
			m.Layers[0].Size -= 10
		}, "longer than its declared size")
	})
	t.Run("size too large", func(t *testing.T) {
		pullRefused(t, layer, func(m *v1.Manifest, _ map[string]any, _ map[string][]byte) {
			m.Layers[0].Size += 10
		}, "its descriptor declares")
	})
	t.Run("digest", func(t *testing.T) {
		pullRefused(t, layer, func(m *v1.Manifest, _ map[string]any, blobs map[string][]byte) {
			blobs[other.String()] = blobOf(t, m)
			m.Layers[0].Digest = other
		}, "layer "+other.String(), "the blob's digest is")
	})
	t.Run("diff id", func(t *testing.T) {
		pullRefused(t, layer, func(_ *v1.Manifest, cfg map[string]any, _ map[string][]byte) {
			cfg["rootfs"].(map[string]any)["diff_ids"] = []string{other.String()}
		}, "config declares diff id "+other.String())
	})
	t.Run("truncated gzip", func(t *testing.T) {
		pullRefused(t, layer, func(m *v1.Manifest, _ map[string]any, blobs map[string][]byte) {
			b := blobOf(t, m)
			b = b[:len(b)/2]
			m.Layers[0].Digest, m.Layers[0].Size = v1.Hash{Algorithm: "sha256", Hex: sha(b)[7:]}, int64(len(b))
			blobs[m.Layers[0].Digest.String()] = b
		}, "unexpected EOF")
	})
}

// Without root, a layer unpacks without chowning, and one with a whiteout
// fails with a reason that says images need root.
func TestUntarAsNonRoot(t *testing.T) {
	owned := mkfile("f", "x", 0o644)
	owned.uid, owned.gid = 4321, 4321
	dir := t.TempDir()
	if _, err := untar(bytes.NewReader(tarOf(t, owned)), dir, defaultLimits, false); err != nil {
		t.Fatal(err)
	}
	if st := stat(t, filepath.Join(dir, "f")); st.Uid == 4321 {
		t.Errorf("chowned without root")
	}
	_, err := untar(bytes.NewReader(tarOf(t, mkfile(".wh.gone", "", 0))), t.TempDir(), defaultLimits, false)
	if !errors.Is(err, errNeedRoot) || !strings.Contains(err.Error(), "gateway running as root") {
		t.Errorf("a whiteout without root: %v", err)
	}
}

// A layer of more entries than the limit is refused; devices and fifos
// are counted and never made.
func TestUntarLimitsAndSkips(t *testing.T) {
	dev := []ent{{name: "null", typ: tar.TypeChar, mode: 0o666}, {name: "sda", typ: tar.TypeBlock, mode: 0o660}, {name: "p", typ: tar.TypeFifo, mode: 0o644}}
	dir := t.TempDir()
	stats, err := untar(bytes.NewReader(tarOf(t, dev...)), dir, limits{Entries: 3, PathLen: 4096, Depth: 256}, true)
	if err != nil || stats.Skipped != 3 {
		t.Fatalf("devices: %+v, %v; want 3 skipped", stats, err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("devices were made: %v", entries)
	}
	_, err = untar(bytes.NewReader(tarOf(t, append(dev, mkfile("f", "", 0o644))...)), t.TempDir(), limits{Entries: 3, PathLen: 4096, Depth: 256}, true)
	var r *refusal
	if !errors.As(err, &r) || !strings.Contains(r.Reason, "more than 3 entries") {
		t.Errorf("a fourth entry over a limit of 3: %v", err)
	}
}
