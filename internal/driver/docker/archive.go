package docker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/moby/moby/api/types/jsonstream"
	"github.com/moby/moby/client"

	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/errdefs"
)

// Images from files on the gateway's host, named as on every driver: a
// `docker save` tarball ("docker-archive:/abs/path.tar") or an OCI image
// layout ("oci:/abs/dir"). They are read with go-containerregistry and
// loaded into the engine as a docker-archive stream (Docker Engine 20.10
// cannot load an OCI layout itself), tagged archiveRepo:<the first 12 hex
// digits of the config's digest>. That tag names the content, so a source
// whose tag the engine has is not loaded again, and prune finds corral's
// loads by it.
const (
	archivePrefix = "docker-archive:"
	ociPrefix     = "oci:"
	archiveRepo   = "corral.local/archive"
)

// localSource splits a file image into its kind (archivePrefix or
// ociPrefix) and path; ok is false for any other image.
func localSource(image string) (kind, path string, ok bool) {
	for _, prefix := range []string{archivePrefix, ociPrefix} {
		if path, ok := strings.CutPrefix(image, prefix); ok {
			return prefix, path, true
		}
	}
	return "", "", false
}

// checkLocal checks a file image: an absolute path to a file (an archive)
// or a directory (a layout) that exists.
func checkLocal(image, kind, path string) error {
	if !filepath.IsAbs(path) {
		return errdefs.InvalidArgument("image %q: %q is not an absolute path", image, path)
	}
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return errdefs.InvalidArgument("image %q: %s does not exist", image, path)
	case err != nil:
		return errdefs.InvalidArgument("image %q: %v", image, err)
	case kind == archivePrefix && !fi.Mode().IsRegular():
		return errdefs.InvalidArgument("image %q: %s is not a file (a docker save archive)", image, path)
	case kind == ociPrefix && !fi.IsDir():
		return errdefs.InvalidArgument("image %q: %s is not a directory (an OCI image layout)", image, path)
	}
	return nil
}

// openLocal reads the image of a file source. What cannot be read is the
// image's fault: InvalidArgument, naming it.
func openLocal(image string) (v1.Image, error) {
	kind, path, _ := localSource(image)
	if err := checkLocal(image, kind, path); err != nil {
		return nil, err
	}
	var (
		img v1.Image
		err error
	)
	if kind == archivePrefix {
		img, err = tarball.ImageFromPath(path, nil) // refuses an archive of several images
	} else {
		img, err = layoutImage(path)
	}
	if err == nil {
		_, err = img.ConfigName()
	}
	if err != nil {
		return nil, errdefs.InvalidArgument("image %q cannot be read: %v", image, err)
	}
	return img, nil
}

// layoutImage is the one image of an OCI layout for this platform (a
// layout of one image, or of one image per platform).
func layoutImage(dir string) (v1.Image, error) {
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, err
	}
	var found []v1.Image
	if err := collectImages(idx, 0, &found); err != nil {
		return nil, err
	}
	switch len(found) {
	case 0:
		return nil, fmt.Errorf("no image for linux/%s in the layout", runtime.GOARCH)
	case 1:
		return found[0], nil
	}
	return nil, fmt.Errorf("%d images for linux/%s in the layout; corral runs a layout of one", len(found), runtime.GOARCH)
}

// collectImages adds the images of idx that run here, following nested
// indexes a little way.
func collectImages(idx v1.ImageIndex, depth int, found *[]v1.Image) error {
	m, err := idx.IndexManifest()
	if err != nil {
		return err
	}
	for _, desc := range m.Manifests {
		p := desc.Platform
		if p != nil && (p.OS != "linux" || p.Architecture != runtime.GOARCH) {
			continue // another platform's, or an attestation ("unknown/unknown")
		}
		switch {
		case desc.MediaType.IsImage():
			img, err := idx.Image(desc.Digest)
			if err != nil {
				return err
			}
			*found = append(*found, img)
		case desc.MediaType.IsIndex() && depth < 2:
			child, err := idx.ImageIndex(desc.Digest)
			if err != nil {
				return err
			}
			if err := collectImages(child, depth+1, found); err != nil {
				return err
			}
		}
	}
	return nil
}

// localTag is the engine tag of a file image's content.
func localTag(img v1.Image) (string, error) {
	cfg, err := img.ConfigName()
	if err != nil {
		return "", err
	}
	return archiveRepo + ":" + cfg.Hex[:12], nil
}

// loadLocal makes sure the engine has a file image and returns its engine
// tag. The engine's having the tag is enough: the tag names the content,
// so every pull policy loads a file image only when it is missing (a local
// file is not a pull; "always" has nothing newer to fetch).
func (d *Driver) loadLocal(ctx context.Context, image string, progress func(driver.ImageProgress)) (string, error) {
	report := func(p driver.ImageProgress) {
		if progress != nil {
			progress(p)
		}
	}
	report(driver.ImageProgress{Status: "resolving"})
	img, err := openLocal(image)
	if err != nil {
		return "", err
	}
	tag, err := localTag(img)
	if err != nil {
		return "", errdefs.InvalidArgument("image %q cannot be read: %v", image, err)
	}
	if _, err := d.api.ImageInspect(ctx, tag); err == nil {
		report(driver.ImageProgress{Status: "cached"})
		return tag, nil
	} else if !cerrdefs.IsNotFound(err) {
		return "", d.wrap(err, fmt.Sprintf("inspect image %q", image))
	}
	if err := d.load(ctx, image, tag, img, report); err != nil {
		return "", err
	}
	report(driver.ImageProgress{Status: "done"})
	return tag, nil
}

// loadStep is how many bytes a load reports progress after.
const loadStep = 1 << 20

// load streams img as a docker-archive tagged tag into the engine.
func (d *Driver) load(ctx context.Context, image, tag string, img v1.Image, report func(driver.ImageProgress)) error {
	ref, err := name.NewTag(tag)
	if err != nil {
		return fmt.Errorf("image %q: tag %s: %w", image, tag, err)
	}
	pr, pw := io.Pipe()
	updates := make(chan v1.Update)
	reported := make(chan struct{})
	go func() { // what tarball.Write has written, every loadStep bytes
		defer close(reported)
		var last int64
		for u := range updates {
			if u.Error == nil && u.Complete-last >= loadStep {
				last = u.Complete
				report(driver.ImageProgress{Status: "loading", Current: u.Complete, Total: u.Total})
			}
		}
	}()
	written := make(chan error, 1)
	go func() {
		err := tarball.Write(ref, img, pw, tarball.WithProgress(updates))
		close(updates)
		pw.CloseWithError(err)
		written <- err
	}()
	res, err := d.api.ImageLoad(ctx, pr, client.ImageLoadWithQuiet(true))
	if err == nil {
		err = loadResult(res)
	}
	pr.CloseWithError(errEngineDone) // ends a write the engine gave up on
	werr := <-written
	<-reported
	switch {
	case werr != nil && !errors.Is(werr, errEngineDone):
		return errdefs.InvalidArgument("image %q cannot be read: %v", image, werr)
	case err != nil:
		return d.wrap(err, fmt.Sprintf("load image %q", image))
	}
	return nil
}

// errEngineDone ends the write of a load once the engine has answered.
var errEngineDone = errors.New("the engine has stopped reading the load")

// loadResult reads the engine's answer to a load: a JSON stream that
// carries an error when the load failed.
func loadResult(res client.ImageLoadResult) error {
	defer res.Close()
	dec := json.NewDecoder(res)
	for {
		var msg jsonstream.Message
		if err := dec.Decode(&msg); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return err
		}
		if msg.Error != nil {
			return errors.New(msg.Error.Message)
		}
	}
}
