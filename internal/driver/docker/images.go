package docker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/image"
	"github.com/moby/moby/api/types/jsonstream"
	"github.com/moby/moby/client"

	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/errdefs"
)

var _ driver.Imager = (*Driver)(nil)

// PullImage implements driver.Imager: a registry image through the
// engine's pull, whose progress stream it reports; a file image
// ("docker-archive:", "oci:") loaded as create loads it.
func (d *Driver) PullImage(ctx context.Context, ref string, progress func(driver.ImageProgress)) (driver.ImageInfo, error) {
	if err := checkImage(ref); err != nil {
		return driver.ImageInfo{}, err
	}
	image := ref
	if _, _, ok := localSource(ref); ok {
		tag, err := d.loadLocal(ctx, ref, progress)
		if err != nil {
			return driver.ImageInfo{}, err
		}
		image = tag
	} else if err := d.pull(ctx, ref, progress); err != nil {
		return driver.ImageInfo{}, err
	}
	return d.imageInfo(ctx, ref, image)
}

// pull pulls a registry image, reporting the engine's progress when
// progress is set. When the engine answers but cannot pull it (no such
// image, no registry), that is the spec's fault until someone provides the
// image: InvalidArgument, so a create fails at once. An engine that does
// not answer, or a call past its deadline, is retried.
func (d *Driver) pull(ctx context.Context, image string, progress func(driver.ImageProgress)) error {
	resp, err := d.api.ImagePull(ctx, image, client.ImagePullOptions{})
	if err == nil {
		defer resp.Close()
		for msg, merr := range resp.JSONMessages(ctx) {
			if merr != nil {
				err = merr
				break
			}
			if msg.Error != nil {
				err = msg.Error
				break
			}
			if p, ok := pullProgress(msg); ok && progress != nil {
				progress(p)
			}
		}
	}
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil, client.IsErrConnectionFailed(err):
		return d.wrap(err, fmt.Sprintf("pull image %q", image))
	}
	return errdefs.InvalidArgument("image %q is not on the engine and cannot be pulled: %s", image, rootCause(d.wrap(err, "pull")))
}

// engineStatus maps the engine's pull statuses to the words of
// driver.ImageProgress; others pass as the engine says them.
var engineStatus = map[string]string{
	"Pulling fs layer":   "resolving",
	"Waiting":            "waiting",
	"Downloading":        "downloading",
	"Verifying Checksum": "downloading",
	"Download complete":  "downloaded",
	"Extracting":         "unpacking",
	"Pull complete":      "done",
	"Already exists":     "cached",
}

// pullProgress is one message of the engine's pull stream as a step: a
// layer's (by the engine's short id) or the image's (the "Pulling from",
// "Digest:" and "Status:" lines). ok is false for what is no step.
func pullProgress(msg jsonstream.Message) (driver.ImageProgress, bool) {
	if msg.Status == "" {
		return driver.ImageProgress{}, false
	}
	p := driver.ImageProgress{Layer: msg.ID, Status: msg.Status}
	if strings.HasPrefix(msg.Status, "Pulling from ") || msg.ID == "" {
		p.Layer = ""
	}
	if s, ok := engineStatus[msg.Status]; ok {
		p.Status = s
	}
	if msg.Progress != nil {
		p.Current, p.Total = msg.Progress.Current, msg.Progress.Total
	}
	return p, true
}

// imageInfo describes the engine's image (a name or id) that ref named.
func (d *Driver) imageInfo(ctx context.Context, ref, image string) (driver.ImageInfo, error) {
	res, err := d.api.ImageInspect(ctx, image)
	if cerrdefs.IsNotFound(err) {
		return driver.ImageInfo{}, errdefs.NotFound("image %q not found", ref)
	}
	if err != nil {
		return driver.ImageInfo{}, d.wrap(err, fmt.Sprintf("inspect image %q", ref))
	}
	used, err := d.sandboxesByImage(ctx)
	if err != nil {
		return driver.ImageInfo{}, err
	}
	info := driver.ImageInfo{ID: res.ID, Refs: tags(res.RepoTags), Size: res.Size, Sandboxes: used[res.ID]}
	info.Created, _ = time.Parse(time.RFC3339Nano, res.Created)
	return info, nil
}

// tags drops the "<none>:<none>" an older engine lists for an image
// without a name.
func tags(repoTags []string) []string {
	return slices.DeleteFunc(slices.Clone(repoTags), func(t string) bool { return t == "<none>:<none>" })
}

// sandboxesByImage counts the sandboxes of this gateway that use each
// image (by id): every incarnation's container, stopped ones too.
func (d *Driver) sandboxesByImage(ctx context.Context) (map[string]int, error) {
	list, err := d.containers(ctx, "")
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	used := map[string]int{}
	for _, c := range list {
		key := c.ImageID + " " + c.Labels[driver.LabelSandboxID]
		if !seen[key] {
			seen[key] = true
			used[c.ImageID]++
		}
	}
	return used, nil
}

// ListImages implements driver.Imager: the engine's images, all of them,
// with how many of this gateway's sandboxes use each.
func (d *Driver) ListImages(ctx context.Context) ([]driver.ImageInfo, error) {
	res, err := d.api.ImageList(ctx, client.ImageListOptions{})
	if err != nil {
		return nil, d.wrap(err, "list images")
	}
	used, err := d.sandboxesByImage(ctx)
	if err != nil {
		return nil, err
	}
	list := make([]driver.ImageInfo, 0, len(res.Items))
	for _, img := range res.Items {
		list = append(list, driver.ImageInfo{ID: img.ID, Refs: tags(img.RepoTags), Size: img.Size,
			Created: time.Unix(img.Created, 0), Sandboxes: used[img.ID]})
	}
	return list, nil
}

// engineImage is the engine's name of the image ref names: a file image's
// tag, else ref itself.
func (d *Driver) engineImage(ref string) (string, error) {
	if _, _, ok := localSource(ref); !ok {
		return ref, checkImage(ref)
	}
	img, err := openLocal(ref)
	if err == nil {
		return localTag(img)
	}
	if errors.Is(err, errdefs.ErrInvalidArgument) {
		return "", errdefs.NotFound("image %q not found: %v", ref, err)
	}
	return "", err
}

// RemoveImage implements driver.Imager. An image that any container of
// the engine uses, this gateway's or not, stays: FailedPrecondition,
// naming the containers.
func (d *Driver) RemoveImage(ctx context.Context, ref string) (driver.ImageInfo, error) {
	image, err := d.engineImage(ref)
	if err != nil {
		return driver.ImageInfo{}, err
	}
	info, err := d.imageInfo(ctx, ref, image)
	if err != nil {
		return driver.ImageInfo{}, err
	}
	users, err := d.containersOf(ctx, info.ID)
	if err != nil {
		return driver.ImageInfo{}, err
	}
	if len(users) > 0 {
		return driver.ImageInfo{}, errdefs.FailedPrecondition("image %q is used by container %s: delete its sandbox (or container) first",
			ref, strings.Join(users, ", "))
	}
	if _, err := d.api.ImageRemove(ctx, image, client.ImageRemoveOptions{PruneChildren: true}); err != nil {
		return driver.ImageInfo{}, d.wrap(err, fmt.Sprintf("remove image %q", ref))
	}
	return info, nil
}

// containersOf names the engine's containers (anyone's) that use the
// image id.
func (d *Driver) containersOf(ctx context.Context, id string) ([]string, error) {
	res, err := d.api.ContainerList(ctx, client.ContainerListOptions{All: true})
	if err != nil {
		return nil, d.wrap(err, "list containers")
	}
	var names []string
	for _, c := range res.Items {
		if c.ImageID == id {
			names = append(names, containerLabel(c))
		}
	}
	return names, nil
}

func containerLabel(c container.Summary) string {
	if len(c.Names) > 0 {
		return strings.TrimPrefix(c.Names[0], "/")
	}
	return c.ID[:min(12, len(c.ID))]
}

// PruneImages implements driver.Imager. It removes only the images corral
// loaded from files ("docker-archive:", "oci:"; tagged archiveRepo) that
// no container of the engine uses. It never removes the engine's other
// images, which are the user's: pulled by hand, built, or used by other
// tools. An image corral loaded that also has a name of the user's only
// loses corral's tag, and is returned with size 0, since nothing was
// freed.
func (d *Driver) PruneImages(ctx context.Context) ([]driver.ImageInfo, error) {
	res, err := d.api.ImageList(ctx, client.ImageListOptions{Filters: client.Filters{}.Add("reference", archiveRepo)})
	if err != nil {
		return nil, d.wrap(err, "list images")
	}
	all, err := d.api.ContainerList(ctx, client.ContainerListOptions{All: true})
	if err != nil {
		return nil, d.wrap(err, "list containers")
	}
	used := map[string]bool{}
	for _, c := range all.Items {
		used[c.ImageID] = true
	}
	var removed []driver.ImageInfo
	for _, img := range res.Items {
		if used[img.ID] {
			continue
		}
		info := driver.ImageInfo{ID: img.ID, Size: img.Size, Created: time.Unix(img.Created, 0)}
		deleted := false
		for _, tag := range tags(img.RepoTags) {
			if !strings.HasPrefix(tag, archiveRepo+":") {
				continue
			}
			out, err := d.api.ImageRemove(ctx, tag, client.ImageRemoveOptions{PruneChildren: true})
			if cerrdefs.IsNotFound(err) || cerrdefs.IsConflict(err) {
				continue // gone meanwhile, or a container took it meanwhile
			}
			if err != nil {
				return removed, d.wrap(err, "remove image "+tag)
			}
			info.Refs = append(info.Refs, tag)
			deleted = deleted || slices.ContainsFunc(out.Items, func(r image.DeleteResponse) bool { return r.Deleted != "" })
		}
		if len(info.Refs) == 0 {
			continue
		}
		if !deleted {
			info.Size = 0
		}
		removed = append(removed, info)
	}
	return removed, nil
}
