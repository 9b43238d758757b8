package images

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/corral-sandbox/corral/internal/errdefs"
)

// The prefixes of refs that name files rather than images.
const (
	ociPrefix     = "oci:"
	archivePrefix = "docker-archive:"
)

// resolved is an image a source found: what it declares, and a way to read
// each layer. The declarations are checked against the bytes as they are
// read (unpack.go), not trusted.
type resolved struct {
	id     string // the digest of the raw config, computed here
	config Config
	layers []blob
}

// blob is one layer as its source offers it.
type blob struct {
	diffID v1.Hash // from the config's rootfs.diff_ids
	// digest and size are the compressed blob's, as the manifest declares
	// them; zero and -1 for a source that declares none (a docker save
	// archive declares only diff ids).
	digest v1.Hash
	size   int64
	// open reads the layer: the blob as stored (gzip, zstd or a plain tar)
	// when raw, else the uncompressed tar.
	open func() (io.ReadCloser, error)
	raw  bool
	// remote blobs are downloaded into dir/tmp before they are unpacked.
	remote bool
	// unpacked bounds the bytes of the layer's files (what is left of
	// maxImageBytes, at most maxLayerBytes); 0: maxLayerBytes.
	unpacked int64
}

// name is how errors name the layer: its digest when the source gives one.
func (b blob) name() string {
	if b.digest.Hex != "" {
		return b.digest.String()
	}
	return b.diffID.String()
}

// isPlain says whether ref is a reference to look up in the engine or a
// registry (rather than a file).
func isPlain(ref string) bool {
	return !strings.HasPrefix(ref, ociPrefix) && !strings.HasPrefix(ref, archivePrefix)
}

// resolve finds ref in its source. release frees what the source holds (an
// engine's export); it is never nil.
func (s *Store) resolve(ctx context.Context, ref string) (r *resolved, release func(), err error) {
	release = func() {}
	switch {
	case strings.HasPrefix(ref, ociPrefix):
		r, err = resolveLayout(ref)
	case strings.HasPrefix(ref, archivePrefix):
		r, err = resolveArchive(ref)
	default:
		if _, perr := name.ParseReference(ref); perr != nil {
			return nil, release, errdefs.InvalidArgument("image %q: not a valid reference: %v", ref, perr)
		}
		if !s.opts.NoEngine {
			var found bool
			r, release, found, err = s.fromEngine(ctx, ref)
			if found || err != nil {
				return r, release, err
			}
		}
		r, err = resolveRegistry(ctx, ref)
	}
	return r, release, err
}

// splitFileRef splits "PATH[:SELECTOR]" where PATH is an absolute path
// that exists (the longest such prefix wins, so a path may hold colons).
func splitFileRef(ref, prefix string) (path, selector string, err error) {
	rest := strings.TrimPrefix(ref, prefix)
	if !filepath.IsAbs(rest) {
		return "", "", errdefs.InvalidArgument("image %q: %s needs an absolute path", ref, strings.TrimSuffix(prefix, ":"))
	}
	if _, err := os.Stat(rest); err == nil {
		return rest, "", nil
	}
	for i := len(rest) - 1; i > 0; i-- {
		if rest[i] != ':' {
			continue
		}
		if _, err := os.Stat(rest[:i]); err == nil {
			return rest[:i], rest[i+1:], nil
		}
	}
	return "", "", errdefs.NotFound("image %q: %s does not exist", ref, rest)
}

// resolveLayout reads "oci:/dir[:tag-or-digest]".
func resolveLayout(ref string) (*resolved, error) {
	dir, sel, err := splitFileRef(ref, ociPrefix)
	if err != nil {
		return nil, err
	}
	p, err := layout.FromPath(dir)
	if err != nil {
		return nil, errdefs.InvalidArgument("image %q: %s is not an OCI image layout: %v", ref, dir, err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		return nil, errdefs.InvalidArgument("image %q: %s is not an OCI image layout: %v", ref, dir, err)
	}
	img, err := pickImage(idx, sel)
	if err != nil {
		return nil, fmt.Errorf("image %q: %w", ref, err)
	}
	return fromManifest(ref, img, false)
}

// pickImage picks from an index the image sel names (a digest, or an
// org.opencontainers.image.ref.name annotation), or its only image; a
// nested index gives its image for this platform.
func pickImage(idx v1.ImageIndex, sel string) (v1.Image, error) {
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, errdefs.InvalidArgument("read the index: %v", err)
	}
	var picked []v1.Descriptor
	for _, d := range m.Manifests {
		switch {
		case sel == "", d.Digest.String() == sel, d.Annotations["org.opencontainers.image.ref.name"] == sel:
			picked = append(picked, d)
		}
	}
	switch {
	case len(picked) == 0 && sel != "":
		return nil, errdefs.NotFound("no image named %q in the layout", sel)
	case len(picked) == 0:
		return nil, errdefs.InvalidArgument("the layout holds no image")
	case len(picked) > 1:
		return nil, errdefs.InvalidArgument("the layout holds %d images: name one with :TAG or :sha256:DIGEST", len(picked))
	}
	d := picked[0]
	if !d.MediaType.IsIndex() {
		return idx.Image(d.Digest)
	}
	inner, err := idx.ImageIndex(d.Digest)
	if err != nil {
		return nil, errdefs.InvalidArgument("read the index %s: %v", d.Digest, err)
	}
	im, err := inner.IndexManifest()
	if err != nil {
		return nil, errdefs.InvalidArgument("read the index %s: %v", d.Digest, err)
	}
	for _, c := range im.Manifests {
		if c.Platform != nil && c.Platform.OS == "linux" && c.Platform.Architecture == runtime.GOARCH {
			return inner.Image(c.Digest)
		}
	}
	return nil, errdefs.NotFound("the index %s has no image for linux/%s", d.Digest, runtime.GOARCH)
}

// fromManifest reads an image that has a manifest (a layout's, a
// registry's): the config is checked against the manifest's digest, the
// layers are read as stored.
func fromManifest(ref string, img v1.Image, remote bool) (*resolved, error) {
	m, err := img.Manifest()
	if err != nil {
		return nil, sourceErr(ref, "read the manifest", err)
	}
	if err := checkShape(ref, len(m.Layers), m.Config.Size); err != nil {
		return nil, err
	}
	raw, err := img.RawConfigFile()
	if err != nil {
		return nil, sourceErr(ref, "read the config", err)
	}
	id, _, err := v1.SHA256(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	if id != m.Config.Digest || int64(len(raw)) != m.Config.Size {
		return nil, errdefs.InvalidArgument("image %q: the config (%s, %d bytes) is not the one the manifest declares (%s, %d bytes)",
			ref, id, len(raw), m.Config.Digest, m.Config.Size)
	}
	r, err := parseConfig(ref, id, raw, len(m.Layers))
	if err != nil {
		return nil, err
	}
	layers, err := img.Layers() // in the manifest's order, each found once (LayerByDigest looks through them all)
	if err != nil {
		return nil, sourceErr(ref, "find the layers", err)
	}
	if len(layers) != len(m.Layers) {
		return nil, errdefs.InvalidArgument("image %q: %d layers found for the manifest's %d", ref, len(layers), len(m.Layers))
	}
	for i, d := range m.Layers {
		l := layers[i]
		r.layers[i].digest, r.layers[i].size = d.Digest, d.Size
		r.layers[i].open, r.layers[i].raw, r.layers[i].remote = l.Compressed, true, remote
	}
	return r, nil
}

// parseConfig reads what a driver needs from a raw config that declares
// layers diff ids.
func parseConfig(ref string, id v1.Hash, raw []byte, layers int) (*resolved, error) {
	if err := checkShape(ref, layers, int64(len(raw))); err != nil {
		return nil, err
	}
	cfg, err := v1.ParseConfigFile(bytes.NewReader(raw))
	if err != nil {
		return nil, errdefs.InvalidArgument("image %q: the config is not valid: %v", ref, err)
	}
	if len(cfg.RootFS.DiffIDs) != layers {
		return nil, errdefs.InvalidArgument("image %q: the config declares %d layers, the manifest %d", ref, len(cfg.RootFS.DiffIDs), layers)
	}
	r := &resolved{id: id.String(), layers: make([]blob, layers), config: Config{
		Entrypoint: cfg.Config.Entrypoint, Cmd: cfg.Config.Cmd, Env: cfg.Config.Env,
		WorkingDir: cfg.Config.WorkingDir, User: cfg.Config.User,
	}}
	for i, d := range cfg.RootFS.DiffIDs {
		if d.Algorithm != "sha256" {
			return nil, errdefs.InvalidArgument("image %q: layer %d has diff id %s: only sha256 is supported", ref, i, d)
		}
		r.layers[i] = blob{diffID: d, size: -1}
	}
	return r, nil
}

// resolveArchive reads "docker-archive:/file.tar[:repo:tag]".
func resolveArchive(ref string) (*resolved, error) {
	file, sel, err := splitFileRef(ref, archivePrefix)
	if err != nil {
		return nil, err
	}
	var tag *name.Tag
	if sel != "" {
		t, err := name.NewTag(sel)
		if err != nil {
			return nil, errdefs.InvalidArgument("image %q: %q is not a repo:tag: %v", ref, sel, err)
		}
		tag = &t
	}
	return readArchive(ref, file, tag)
}

// readArchive reads a `docker save` archive (also an engine's export). It
// declares only diff ids: the layers are read uncompressed and checked
// against them.
func readArchive(ref, file string, tag *name.Tag) (*resolved, error) {
	img, err := tarball.ImageFromPath(file, tag)
	if err != nil {
		return nil, errdefs.InvalidArgument("image %q: %s is not a docker save archive: %v", ref, file, err)
	}
	m, err := img.Manifest() // the archive's, made from its manifest.json: the config's size is known
	if err != nil {
		return nil, errdefs.InvalidArgument("image %q: read the manifest: %v", ref, err)
	}
	if err := checkShape(ref, len(m.Layers), m.Config.Size); err != nil {
		return nil, err
	}
	raw, err := img.RawConfigFile()
	if err != nil {
		return nil, errdefs.InvalidArgument("image %q: read the config: %v", ref, err)
	}
	id, _, err := v1.SHA256(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	layers, err := img.Layers()
	if err != nil {
		return nil, errdefs.InvalidArgument("image %q: read the layers: %v", ref, err)
	}
	r, err := parseConfig(ref, id, raw, len(layers))
	if err != nil {
		return nil, err
	}
	for i, l := range layers {
		r.layers[i].open = l.Uncompressed
	}
	return r, nil
}

// sourceErr classes an error of a source: a missing file or image is
// NotFound, anything else names the step.
func sourceErr(ref, what string, err error) error {
	if errors.Is(err, os.ErrNotExist) {
		return errdefs.NotFound("image %q: %s: %v", ref, what, err)
	}
	return fmt.Errorf("image %q: %s: %w", ref, what, err)
}
