package native

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/driver/native/shim"
	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/images"
	"github.com/corral-sandbox/corral/internal/supervisor"
)

// Images is the cache the driver runs OCI images from (an *images.Store).
type Images interface {
	Pull(ctx context.Context, ref string, progress func(images.Progress), opts ...images.PullOptions) (images.Image, error)
	List() ([]images.Image, error)
	Remove(ref string, inUse func(id string) bool) (images.Image, error)
	Prune(inUse func(id string) bool) ([]images.Image, error)
	Evict(maxBytes int64, inUse func(id string) bool) ([]images.Image, error)
	LayerPath(diffID string) string
	ReadFile(img images.Image, path string) ([]byte, error)
}

var (
	_ driver.LocalImager = (*Driver)(nil)
	_ Images             = (*images.Store)(nil)
)

// ociImage tells an OCI image reference ("python:3.12", "oci:/dir",
// "docker-archive:/file.tar") from the host's operating system and a root
// directory.
func ociImage(image string) bool {
	return image != "" && image != HostImage && !filepath.IsAbs(image)
}

// LocalImage implements driver.LocalImager: the host's operating system
// and a root directory are used where they are.
func (d *Driver) LocalImage(image string) bool { return image != "" && !ociImage(image) }

// checkOCI says why this driver cannot run an OCI image, if it cannot.
func (d *Driver) checkOCI(image string) error {
	if d.opts.Images == nil {
		return errdefs.InvalidArgument("image %q: this native driver has no image cache; give the host's operating system (%q) or a root directory by its absolute path", image, HostImage)
	}
	if os.Geteuid() != 0 {
		return errdefs.InvalidArgument("image %q: OCI images on the native driver need a gateway that runs as root (each sandbox sees the shared layers through idmapped mounts); run it as root, or give an unpacked root directory by its absolute path", image)
	}
	return images.Check(image)
}

// useImage pulls an OCI image (unpacking only what the cache lacks) and
// fills in what the object takes from it: layers, the command when the
// spec gives none, environment, working directory and user when the policy
// names none.
func (d *Driver) useImage(ctx context.Context, o *object, image string) error {
	img, err := d.opts.Images.Pull(ctx, image, nil)
	if errors.Is(err, errdefs.ErrNotFound) {
		// Retrying finds nothing more until someone provides the image.
		return errdefs.InvalidArgument("%v", err)
	}
	if err != nil {
		return err
	}
	cfg := img.Config
	o.ImageID, o.Layers, o.Env, o.Dir = img.ID, img.Layers, cfg.Env, cfg.WorkingDir
	if len(o.Command) == 0 {
		o.Command = append(append([]string{}, cfg.Entrypoint...), cfg.Cmd...)
	}
	if len(o.Command) == 0 {
		return errdefs.InvalidArgument("image %q has no command: give one after --", image)
	}
	if o.Policy.Process.RunAsUser == nil && cfg.User != "" {
		passwd, _ := d.opts.Images.ReadFile(img, "/etc/passwd") // a numeric user needs none
		uid, err := supervisor.ResolveUser(cfg.User, passwd)
		if err != nil {
			return errdefs.InvalidArgument("image %q: %v", image, err)
		}
		o.Policy.Process.RunAsUser = &uid
	}
	return nil
}

// layerPaths are the host directories of an object's image layers.
func (d *Driver) layerPaths(o *object) []string {
	paths := make([]string, len(o.Layers))
	for i, l := range o.Layers {
		paths[i] = d.opts.Images.LayerPath(l)
	}
	return paths
}

// imageEnv is the environment an image's sandbox starts with: the image's,
// with the sandbox's PATH and HOME where the image sets none.
func imageEnv(env []string) []string {
	var out []string
	has := map[string]bool{}
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		has[k] = true
		out = append(out, kv)
	}
	if !has["PATH"] {
		out = append(out, shim.DefaultPath)
	}
	if !has["HOME"] {
		out = append(out, "HOME=/sandbox")
	}
	return out
}

// PullImage implements driver.Imager.
func (d *Driver) PullImage(ctx context.Context, ref string, progress func(driver.ImageProgress)) (driver.ImageInfo, error) {
	if err := d.checkOCI(ref); err != nil {
		return driver.ImageInfo{}, err
	}
	img, err := d.opts.Images.Pull(ctx, ref, func(p images.Progress) {
		if progress != nil {
			progress(driver.ImageProgress{Layer: p.Layer, Status: p.Status, Current: p.Current, Total: p.Total})
		}
	})
	if err != nil {
		return driver.ImageInfo{}, err
	}
	if err := d.evictImages(img.ID); err != nil {
		return driver.ImageInfo{}, err
	}
	return d.imageInfo(img, nil), nil
}

// evictImages keeps the image cache within Options.ImageCacheBytes: past
// it, the images no sandbox uses go, least recently pulled first, but
// keep, the one just pulled. Which images sandboxes use is read (every
// sandbox's object) only when the cache is past its bound.
func (d *Driver) evictImages(keep string) error {
	d.imagesMu.Lock()
	defer d.imagesMu.Unlock()
	var used map[string]int
	var usedErr error
	inUse := func(id string) bool {
		if id == keep {
			return true
		}
		if used == nil && usedErr == nil {
			used, usedErr = d.imagesInUse()
		}
		return usedErr != nil || used[id] > 0 // not known: kept
	}
	_, err := d.opts.Images.Evict(cmp.Or(d.opts.ImageCacheBytes, DefaultImageCacheBytes), inUse)
	return errors.Join(err, usedErr)
}

// ListImages implements driver.Imager.
func (d *Driver) ListImages(ctx context.Context) ([]driver.ImageInfo, error) {
	if d.opts.Images == nil {
		return nil, nil
	}
	imgs, err := d.opts.Images.List()
	if err != nil {
		return nil, err
	}
	used, err := d.imagesInUse()
	if err != nil {
		return nil, err
	}
	out := make([]driver.ImageInfo, len(imgs))
	for i, img := range imgs {
		out[i] = d.imageInfo(img, used)
	}
	return out, nil
}

// RemoveImage implements driver.Imager.
func (d *Driver) RemoveImage(ctx context.Context, ref string) (driver.ImageInfo, error) {
	if d.opts.Images == nil {
		return driver.ImageInfo{}, errdefs.NotFound("no image %q: this native driver has no image cache", ref)
	}
	d.imagesMu.Lock() // no create records a new use meanwhile
	defer d.imagesMu.Unlock()
	used, err := d.imagesInUse()
	if err != nil {
		return driver.ImageInfo{}, err
	}
	img, err := d.opts.Images.Remove(ref, func(id string) bool { return used[id] > 0 })
	return d.imageInfo(img, nil), err
}

// PruneImages implements driver.Imager.
func (d *Driver) PruneImages(ctx context.Context) ([]driver.ImageInfo, error) {
	if d.opts.Images == nil {
		return nil, nil
	}
	d.imagesMu.Lock()
	defer d.imagesMu.Unlock()
	used, err := d.imagesInUse()
	if err != nil {
		return nil, err
	}
	imgs, err := d.opts.Images.Prune(func(id string) bool { return used[id] > 0 })
	out := make([]driver.ImageInfo, len(imgs))
	for i, img := range imgs {
		out[i] = d.imageInfo(img, nil)
	}
	return out, err
}

// imagesInUse counts the sandboxes (running or not) of each image id.
func (d *Driver) imagesInUse() (map[string]int, error) {
	entries, err := os.ReadDir(filepath.Join(d.cfg.StateDir, "sandboxes"))
	if err != nil {
		return nil, fmt.Errorf("native driver: %w", err)
	}
	used := map[string]int{}
	for _, e := range entries {
		if o, err := d.loadAny(e.Name()); err == nil && o.ImageID != "" {
			used[o.ImageID]++
		}
	}
	return used, nil
}

func (d *Driver) imageInfo(img images.Image, used map[string]int) driver.ImageInfo {
	return driver.ImageInfo{ID: img.ID, Refs: img.Refs, Size: img.Size, Created: img.Pulled, Sandboxes: used[img.ID]}
}
