// Package driverimages is the driver's images as every front end offers
// them: pull (with the gateway's pull policy, ahead of a create), list,
// remove and prune, through driver.Imager, each call bounded.
package driverimages

import (
	"context"
	"strings"
	"time"

	"github.com/distribution/reference"

	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/lifecycle"
)

// The bounds of image calls: a pull moves whole images, the others only
// look at or remove what the store has.
const (
	imagePullTimeout = time.Hour
	imageCallTimeout = 5 * time.Minute
)

// Images are the images of one driver.
type Images struct {
	driver     driver.Driver
	pullPolicy string // never, if_not_present or always
}

// New is the images of drv, pulled ahead of a create under pullPolicy (as
// the driver's create follows it).
func New(drv driver.Driver, pullPolicy string) *Images {
	return &Images{driver: drv, pullPolicy: pullPolicy}
}

// imager is the driver's driver.Imager, or errdefs.ErrNotImplemented
// naming the driver.
func (m *Images) imager() (driver.Imager, error) {
	im, ok := m.driver.(driver.Imager)
	if !ok {
		return nil, errdefs.NotImplemented("the %s driver keeps no images", m.driver.Name())
	}
	return im, nil
}

// checkImageRef is the byte-level check of an image named by an image
// call, as a create checks its image.
func checkImageRef(ref string) error {
	if ref == "" {
		return errdefs.InvalidArgument("no image named")
	}
	return lifecycle.ValidateImage(ref)
}

// PullImage brings ref into the driver's store, calling progress with each
// step. With ifNeeded it pulls only what a create of ref would under the
// gateway's image pull policy: nothing when the policy is never, or when
// the store has ref already and the policy is not always; then it returns
// nil and no error, and the create does what it always does.
func (m *Images) PullImage(ctx context.Context, ref string, ifNeeded bool, progress func(driver.ImageProgress)) (*driver.ImageInfo, error) {
	im, err := m.imager() // first: a create on a driver without images goes on to check its image itself
	if err != nil {
		return nil, err
	}
	if local, ok := im.(driver.LocalImager); ok && ifNeeded && local.LocalImage(ref) {
		return nil, nil // a create uses it where it is
	}
	if err := checkImageRef(ref); err != nil {
		return nil, err
	}
	if ifNeeded {
		switch m.pullPolicy {
		case "never":
			return nil, nil
		case "always":
		default:
			ctx, cancel := context.WithTimeout(ctx, imageCallTimeout)
			list, err := im.ListImages(ctx)
			cancel()
			if err != nil {
				return nil, err
			}
			for _, img := range list {
				if hasRef(img, ref) {
					return nil, nil
				}
			}
		}
	}
	ctx, cancel := context.WithTimeout(ctx, imagePullTimeout)
	defer cancel()
	img, err := im.PullImage(ctx, ref, progress)
	if err != nil {
		return nil, err
	}
	return &img, nil
}

// hasRef tells whether img is what ref names: one of its names (compared
// as Docker normalizes them: busybox is docker.io/library/busybox:latest),
// or its id or an id prefix of 12 hex digits or more.
func hasRef(img driver.ImageInfo, ref string) bool {
	hex := strings.TrimPrefix(ref, "sha256:")
	if len(hex) >= 12 && strings.HasPrefix(strings.TrimPrefix(img.ID, "sha256:"), hex) {
		return true
	}
	want := normalRef(ref)
	for _, r := range img.Refs {
		if r == ref || normalRef(r) == want {
			return true
		}
	}
	return false
}

// normalRef is a registry reference in full (with its registry and a
// tag), or the string itself when it is none (an archive's path, say).
func normalRef(ref string) string {
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return ref
	}
	return reference.TagNameOnly(named).String()
}

// ListImages returns the images of the driver's store.
func (m *Images) ListImages(ctx context.Context) ([]driver.ImageInfo, error) {
	im, err := m.imager()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, imageCallTimeout)
	defer cancel()
	return im.ListImages(ctx)
}

// RemoveImage removes one image by a name or id.
func (m *Images) RemoveImage(ctx context.Context, ref string) (driver.ImageInfo, error) {
	if err := checkImageRef(ref); err != nil {
		return driver.ImageInfo{}, err
	}
	im, err := m.imager()
	if err != nil {
		return driver.ImageInfo{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, imageCallTimeout)
	defer cancel()
	return im.RemoveImage(ctx, ref)
}

// PruneImages removes the images that no sandbox uses and that the driver
// may remove, and returns them.
func (m *Images) PruneImages(ctx context.Context) ([]driver.ImageInfo, error) {
	im, err := m.imager()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, imageCallTimeout)
	defer cancel()
	return im.PruneImages(ctx)
}
