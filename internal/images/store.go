package images

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/corral-sandbox/corral/internal/atomicfile"
	"github.com/corral-sandbox/corral/internal/errdefs"
)

// EngineAddress is a Docker engine's address as the Docker client takes
// it: a bare socket path becomes unix://PATH; "" stays "" (DOCKER_HOST or
// the default socket).
func EngineAddress(s string) string {
	if s != "" && !strings.Contains(s, "://") {
		return "unix://" + s
	}
	return s
}

// Options configure a Store.
type Options struct {
	// DockerHost is the engine asked first for a plain reference ("" =
	// DOCKER_HOST or the default socket); NoEngine skips the engine.
	DockerHost string
	NoEngine   bool
}

// Store is the image cache under one directory:
//
//	dir/index.json                the images and the names they were pulled as
//	dir/layers/sha256/<hex>/      one unpacked layer per diff id (overlayfs format)
//	dir/tmp/                      layers being unpacked, downloads, engine exports
//
// A layer is unpacked in dir/tmp and renamed into place only once complete
// and verified; it is deleted by first renaming it back into dir/tmp. The
// index is replaced whole (temporary file, fsync, rename), so a crash at
// any instant leaves the previous index or the new one. Nothing outside dir
// is ever written. A Store is safe for concurrent use; one process at a
// time may use a directory (the gateway's home lock sees to that).
type Store struct {
	dir  string
	opts Options

	flight flight // one unpacking per diff id at a time

	mu     sync.Mutex
	images map[string]*Image // by id
	pinned map[string]int    // diff ids that pulls in flight use
	temps  map[string]bool   // entries of dir/tmp that calls in flight use
	sizes  map[string]int64  // unpacked sizes of layers, by diff id

	unpacked atomic.Int64 // layers unpacked since Open (tests count them)
}

// index is the content of dir/index.json.
type index struct {
	Version int      `json:"version"`
	Images  []*Image `json:"images"`
}

const indexVersion = 1

// Open opens (creating it if need be) the cache in dir. It removes what an
// earlier process left in dir/tmp.
func Open(dir string, opts Options) (*Store, error) {
	if !filepath.IsAbs(dir) {
		return nil, errdefs.InvalidArgument("image cache %q: not an absolute path", dir)
	}
	s := &Store{dir: dir, opts: opts, images: map[string]*Image{}, pinned: map[string]int{},
		temps: map[string]bool{}, sizes: map[string]int64{}}
	for _, d := range []string{dir, s.tmpDir(), filepath.Join(dir, "layers", "sha256")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("image cache: %w", err)
		}
	}
	if err := os.Chmod(filepath.Join(dir, "layers"), 0o755); err != nil {
		return nil, fmt.Errorf("image cache: %w", err)
	}
	if err := os.Chmod(filepath.Join(dir, "layers", "sha256"), 0o755); err != nil {
		return nil, fmt.Errorf("image cache: %w", err)
	}
	if err := s.cleanTmp(); err != nil {
		return nil, err
	}
	for _, tmp := range atomicfile.TempFiles(s.indexPath()) {
		_ = os.Remove(tmp)
	}
	data, err := os.ReadFile(s.indexPath())
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return s, nil
	case err != nil:
		return nil, fmt.Errorf("image cache: %w", err)
	}
	var idx index
	if err := json.Unmarshal(data, &idx); err != nil {
		return nil, fmt.Errorf("image cache: %s is corrupt: %w", s.indexPath(), err)
	}
	if idx.Version != indexVersion {
		return nil, errdefs.FailedPrecondition("image cache: %s has version %d, this corral reads %d", s.indexPath(), idx.Version, indexVersion)
	}
	for _, img := range idx.Images {
		s.images[img.ID] = img
	}
	return s, nil
}

func (s *Store) indexPath() string { return filepath.Join(s.dir, "index.json") }
func (s *Store) tmpDir() string    { return filepath.Join(s.dir, "tmp") }

// LayerPath returns the directory of the unpacked layer with the given diff
// id ("sha256:…"), whether or not it is present; "" for a malformed id.
func (s *Store) LayerPath(diffID string) string {
	h, err := v1.NewHash(diffID)
	if err != nil || h.Algorithm != "sha256" {
		return ""
	}
	return filepath.Join(s.dir, "layers", h.Algorithm, h.Hex)
}

// Get returns the cached image that ref names: a name it was pulled as
// (also in another spelling of the same reference, "busybox" for
// "docker.io/library/busybox:latest"), or its id or a prefix of the id's
// hex of at least 12 digits. An unknown ref is errdefs.ErrNotFound.
func (s *Store) Get(ref string) (Image, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	img, err := s.find(ref)
	if err != nil {
		return Image{}, err
	}
	return clone(img), nil
}

// find is Get with s.mu held.
func (s *Store) find(ref string) (*Image, error) {
	norm := normalize(ref)
	for _, img := range s.images {
		for _, r := range img.Refs {
			if r == ref || (norm != "" && normalize(r) == norm) {
				return img, nil
			}
		}
	}
	hex := strings.TrimPrefix(ref, "sha256:")
	if len(hex) >= 12 && isHex(hex) {
		var found []*Image
		for id, img := range s.images {
			if strings.HasPrefix(strings.TrimPrefix(id, "sha256:"), hex) {
				found = append(found, img)
			}
		}
		if len(found) == 1 {
			return found[0], nil
		}
		if len(found) > 1 {
			return nil, errdefs.InvalidArgument("image %q: the prefix matches %d images; give more of the id", ref, len(found))
		}
	}
	return nil, errdefs.NotFound("image %q is not in the image cache", ref)
}

// normalize returns the full spelling of a plain reference, "" for
// anything else.
func normalize(ref string) string {
	if strings.HasPrefix(ref, "oci:") || strings.HasPrefix(ref, "docker-archive:") {
		return ""
	}
	r, err := name.ParseReference(ref)
	if err != nil {
		return ""
	}
	return r.Name()
}

func isHex(s string) bool {
	return strings.Trim(s, "0123456789abcdef") == ""
}

// List returns the cached images, newest first.
func (s *Store) List() ([]Image, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Image, 0, len(s.images))
	for _, img := range s.images {
		out = append(out, clone(img))
	}
	slices.SortFunc(out, func(a, b Image) int {
		if c := b.Pulled.Compare(a.Pulled); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out, nil
}

// Remove removes the image ref names (all its names) from the cache, and
// the layers that no remaining image has. An image for which inUse says
// true is errdefs.ErrFailedPrecondition. inUse is called with the store
// locked: it must not call back into the Store.
func (s *Store) Remove(ref string, inUse func(id string) bool) (Image, error) {
	s.mu.Lock()
	img, err := s.find(ref)
	if err != nil {
		s.mu.Unlock()
		return Image{}, err
	}
	if inUse != nil && inUse(img.ID) {
		s.mu.Unlock()
		return Image{}, errdefs.FailedPrecondition("image %q (%s) is in use by a sandbox", ref, img.ID)
	}
	out := clone(img)
	doomed, err := s.dropLocked([]*Image{img})
	s.mu.Unlock()
	return out, errors.Join(err, s.removeTemps(doomed))
}

// Prune removes every image for which inUse says false, the layers no
// remaining image has, and whatever no call in flight uses in dir/tmp. It
// returns the images it removed. inUse is called with the store locked.
func (s *Store) Prune(inUse func(id string) bool) ([]Image, error) {
	s.mu.Lock()
	var gone []*Image
	var out []Image
	for _, img := range s.images {
		if inUse == nil || !inUse(img.ID) {
			gone = append(gone, img)
			out = append(out, clone(img))
		}
	}
	doomed, err := s.dropLocked(gone)
	s.mu.Unlock()
	if err := errors.Join(err, s.removeTemps(doomed)); err != nil {
		return out, err
	}
	return out, s.cleanTmp()
}

// dropLocked takes images out of the index and moves every layer that no
// image left and no pull in flight has into dir/tmp, under names reserved
// for the caller to remove (removeTemps) once it has unlocked s.mu.
func (s *Store) dropLocked(gone []*Image) ([]string, error) {
	for _, img := range gone {
		delete(s.images, img.ID)
	}
	if len(gone) > 0 {
		if err := s.writeIndexLocked(); err != nil {
			for _, img := range gone {
				s.images[img.ID] = img
			}
			return nil, err
		}
	}
	keep := map[string]bool{}
	for _, img := range s.images {
		for _, l := range img.Layers {
			keep[l] = true
		}
	}
	layers := filepath.Join(s.dir, "layers", "sha256")
	entries, err := os.ReadDir(layers)
	if err != nil {
		return nil, fmt.Errorf("image cache: %w", err)
	}
	var doomed []string
	for _, e := range entries {
		id := "sha256:" + e.Name()
		if keep[id] || s.pinned[id] > 0 {
			continue
		}
		// Renamed out of place first: a crash midway leaves a partial tree
		// only in tmp, never under the layer's own name.
		to, err := s.newTempLocked("removed", true)
		if err != nil {
			return doomed, err
		}
		doomed = append(doomed, to)
		if err := os.Rename(filepath.Join(layers, e.Name()), filepath.Join(to, "layer")); err != nil {
			return doomed, fmt.Errorf("image cache: remove layer %s: %w", id, err)
		}
		delete(s.sizes, id)
	}
	return doomed, nil
}

// writeIndexLocked writes the index: a temporary file, fsync, rename,
// fsync of the directory.
func (s *Store) writeIndexLocked() error {
	idx := index{Version: indexVersion, Images: make([]*Image, 0, len(s.images))}
	for _, img := range s.images {
		idx.Images = append(idx.Images, img)
	}
	slices.SortFunc(idx.Images, func(a, b *Image) int { return strings.Compare(a.ID, b.ID) })
	data, err := json.MarshalIndent(idx, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.WriteDurable(s.indexPath(), data, 0o600); err != nil {
		return fmt.Errorf("image cache: write index: %w", err)
	}
	return nil
}

// layerSize is what a present layer takes, in bytes of its regular files.
func (s *Store) layerSize(diffID string) (int64, error) {
	s.mu.Lock()
	n, ok := s.sizes[diffID]
	s.mu.Unlock()
	if ok {
		return n, nil
	}
	seen := map[uint64]bool{} // a hard link's bytes count once
	err := filepath.WalkDir(s.LayerPath(diffID), func(_ string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Nlink > 1 {
			if seen[st.Ino] {
				return nil
			}
			seen[st.Ino] = true
		}
		n += fi.Size()
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("image cache: layer %s: %w", diffID, err)
	}
	s.mu.Lock()
	s.sizes[diffID] = n
	s.mu.Unlock()
	return n, nil
}

func clone(img *Image) Image {
	out := *img
	out.Refs = slices.Clone(img.Refs)
	out.Layers = slices.Clone(img.Layers)
	out.Config.Entrypoint = slices.Clone(img.Config.Entrypoint)
	out.Config.Cmd = slices.Clone(img.Config.Cmd)
	out.Config.Env = slices.Clone(img.Config.Env)
	return out
}

// Evict removes images for which inUse says false, least recently pulled
// first, until the layers the cache keeps take at most maxBytes (or no
// such image is left), and returns those it removed: the cache stays
// bounded, and what a sandbox runs stays.
func (s *Store) Evict(maxBytes int64, inUse func(id string) bool) ([]Image, error) {
	imgs, err := s.List()
	if err != nil {
		return nil, err
	}
	holders := map[string]int{} // layer -> images that have it
	sizes := map[string]int64{}
	var total int64
	for _, img := range imgs {
		for _, l := range img.Layers {
			if holders[l]++; holders[l] == 1 {
				n, err := s.layerSize(l)
				if err != nil {
					return nil, err
				}
				sizes[l] = n
				total += n
			}
		}
	}
	slices.SortFunc(imgs, func(a, b Image) int { return a.Pulled.Compare(b.Pulled) })
	var gone []Image
	for _, img := range imgs {
		if total <= maxBytes {
			break
		}
		if inUse(img.ID) {
			continue
		}
		if _, err := s.Remove(img.ID, inUse); err != nil {
			return gone, err
		}
		gone = append(gone, img)
		for _, l := range img.Layers {
			if holders[l]--; holders[l] == 0 {
				total -= sizes[l]
			}
		}
	}
	return gone, nil
}
