package images

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// mtime is the time every test entry carries.
var mtime = time.Unix(1700000000, 0)

// ent is one tar entry of a test layer.
type ent struct {
	name, body, link string
	typ              byte
	mode             int64
	uid, gid         int
}

func mkfile(name, body string, mode int64) ent {
	return ent{name: name, body: body, typ: tar.TypeReg, mode: mode}
}
func mkdir(name string) ent      { return ent{name: name, typ: tar.TypeDir, mode: 0o755} }
func mksym(name, to string) ent  { return ent{name: name, link: to, typ: tar.TypeSymlink, mode: 0o777} }
func mklink(name, to string) ent { return ent{name: name, link: to, typ: tar.TypeLink, mode: 0o644} }

// tarOf writes entries as a tar stream.
func tarOf(t *testing.T, entries ...ent) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		hdr := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: e.mode, Uid: e.uid, Gid: e.gid,
			ModTime: mtime, Size: int64(len(e.body)), Format: tar.FormatPAX}
		if e.typ != tar.TypeReg {
			hdr.Size = 0
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(tw, e.body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// layerOf is a gzip layer of a tar stream.
func layerOf(t *testing.T, tarBytes []byte) v1.Layer {
	t.Helper()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(tarBytes)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// imageOf builds an image of layers (tar streams), bottom first.
func imageOf(t *testing.T, cfg v1.Config, tars ...[]byte) v1.Image {
	t.Helper()
	img := empty.Image
	for _, tb := range tars {
		var err error
		if img, err = mutate.AppendLayers(img, layerOf(t, tb)); err != nil {
			t.Fatal(err)
		}
	}
	img, err := mutate.Config(img, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// writeArchive writes img as a docker save archive tagged tag.
func writeArchive(t *testing.T, img v1.Image, tag string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "image.tar")
	r, err := name.ParseReference(tag)
	if err != nil {
		t.Fatal(err)
	}
	if err := tarball.WriteToFile(file, r, img); err != nil {
		t.Fatal(err)
	}
	return file
}

// writeLayout writes img as an OCI layout, annotated with ref name tag.
func writeLayout(t *testing.T, img v1.Image, tag string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "layout")
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": tag})); err != nil {
		t.Fatal(err)
	}
	return dir
}

var (
	regOnce sync.Once
	regHost string
)

// testRegistry is a registry on 127.0.0.1 for the whole test binary.
func testRegistry(t *testing.T) string {
	regOnce.Do(func() {
		srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
		regHost = strings.TrimPrefix(srv.URL, "http://")
	})
	return regHost
}

// push writes img to the test registry as repo:tag and returns the ref.
func push(t *testing.T, img v1.Image, repoTag string) string {
	t.Helper()
	ref := testRegistry(t) + "/" + repoTag
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img); err != nil {
		t.Fatal(err)
	}
	return ref
}

// newStore opens a cache in dir "cache" of a fresh parent, which it returns
// too, with an empty sentinel directory beside the cache.
func newStore(t *testing.T) (*Store, string) {
	t.Helper()
	parent := t.TempDir()
	if err := os.Mkdir(filepath.Join(parent, "sentinel"), 0o755); err != nil {
		t.Fatal(err)
	}
	s, err := Open(filepath.Join(parent, "cache"), Options{NoEngine: true})
	if err != nil {
		t.Fatal(err)
	}
	return s, parent
}

// events collects progress events.
type events struct {
	mu  sync.Mutex
	all []Progress
}

func (e *events) add(p Progress) { e.mu.Lock(); e.all = append(e.all, p); e.mu.Unlock() }

// statuses counts the events of each status, and the layers that had each.
func (e *events) statuses() (count map[string]int, layers map[string]map[string]bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	count, layers = map[string]int{}, map[string]map[string]bool{}
	for _, p := range e.all {
		count[p.Status]++
		if layers[p.Status] == nil {
			layers[p.Status] = map[string]bool{}
		}
		if p.Layer != "" {
			layers[p.Status][p.Layer] = true
		}
	}
	return count, layers
}

func sha(b []byte) string { s := sha256.Sum256(b); return "sha256:" + hex.EncodeToString(s[:]) }

// editLayout rewrites the one image of an OCI layout: edit may change the
// manifest and the config (raw JSON) and add blobs; the new config and
// manifest are written and the index points at them.
func editLayout(t *testing.T, dir string, edit func(m *v1.Manifest, cfg map[string]any, blobs map[string][]byte)) {
	t.Helper()
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	img, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := img.RawConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	blobs := map[string][]byte{}
	edit(m, cfg, blobs)
	if raw, err = json.Marshal(cfg); err != nil {
		t.Fatal(err)
	}
	m.Config.Digest, m.Config.Size = v1.Hash{Algorithm: "sha256", Hex: sha(raw)[7:]}, int64(len(raw))
	blobs[m.Config.Digest.String()] = raw
	mraw, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	blobs[sha(mraw)] = mraw
	for digest, b := range blobs {
		if err := os.WriteFile(filepath.Join(dir, "blobs", "sha256", strings.TrimPrefix(digest, "sha256:")), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	im.Manifests[0].Digest = v1.Hash{Algorithm: "sha256", Hex: sha(mraw)[7:]}
	im.Manifests[0].Size = int64(len(mraw))
	iraw, err := json.Marshal(im)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "index.json"), iraw, 0o644); err != nil {
		t.Fatal(err)
	}
}

// outsideCache lists what is under parent but neither the cache nor the
// (empty) sentinel directory: what a pull wrote where it must not.
func outsideCache(t *testing.T, parent string) []string {
	t.Helper()
	var stray []string
	err := filepath.Walk(parent, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		switch p {
		case parent, filepath.Join(parent, "sentinel"):
			return nil
		case filepath.Join(parent, "cache"):
			return filepath.SkipDir
		}
		stray = append(stray, p)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return stray
}
