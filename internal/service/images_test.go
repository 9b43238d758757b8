package service

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/driver/fake"
	"github.com/corral-sandbox/corral/internal/driverimages"
	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/lifecycle"
	"github.com/corral-sandbox/corral/internal/store/sqlite"
)

// manager is a real lifecycle on drv, served over bufconn.
func manager(t *testing.T, drv driver.Driver, pullPolicy string) corralv1.SandboxServiceClient {
	t.Helper()
	dir := t.TempDir()
	st, err := sqlite.Open(context.Background(), filepath.Join(dir, "corral.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	m := lifecycle.New(lifecycle.Config{Store: st, Driver: drv, Instance: "test",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	t.Cleanup(func() { _ = m.Shutdown(context.Background(), time.Second) })
	return corralv1.NewSandboxServiceClient(dial(t, Core{Sandboxes: m, Images: driverimages.New(drv, pullPolicy)}))
}

func newFake(t *testing.T) *fake.Driver {
	t.Helper()
	drv, err := fake.New(driver.Config{Label: "corral.test", StateDir: t.TempDir()}, fake.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return drv
}

// pull runs PullImage to its end and returns the messages.
func pull(api corralv1.SandboxServiceClient, req *corralv1.PullImageRequest) ([]*corralv1.PullImageProgress, error) {
	stream, err := api.PullImage(context.Background(), req)
	if err != nil {
		return nil, err
	}
	var msgs []*corralv1.PullImageProgress
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return msgs, nil
		}
		if err != nil {
			return msgs, err
		}
		msgs = append(msgs, msg)
	}
}

// A driver that keeps no images (the fake) answers every image call with
// Unimplemented, naming the driver.
func TestImagesOnADriverWithoutImages(t *testing.T) {
	api := manager(t, newFake(t), "if_not_present")
	ctx := context.Background()
	_, pullErr := pull(api, &corralv1.PullImageRequest{Image: "busybox"})
	_, listErr := api.ListImages(ctx, &corralv1.ListImagesRequest{})
	_, rmErr := api.RemoveImage(ctx, &corralv1.RemoveImageRequest{Image: "busybox"})
	_, pruneErr := api.PruneImages(ctx, &corralv1.PruneImagesRequest{})
	for what, err := range map[string]error{"pull": pullErr, "list": listErr, "rm": rmErr, "prune": pruneErr} {
		if status.Code(err) != codes.Unimplemented || !strings.Contains(err.Error(), "fake driver") {
			t.Errorf("%s on the fake driver = %v, want Unimplemented naming the driver", what, err)
		}
	}
}

// imager is the fake driver with a store of images.
type imager struct {
	*fake.Driver
	images  []driver.ImageInfo
	pulled  []string
	removed []string
}

func (d *imager) PullImage(_ context.Context, ref string, progress func(driver.ImageProgress)) (driver.ImageInfo, error) {
	d.pulled = append(d.pulled, ref)
	if ref == "nosuch" {
		return driver.ImageInfo{}, errdefs.InvalidArgument("image %q cannot be pulled", ref)
	}
	progress(driver.ImageProgress{Status: "resolving"})
	progress(driver.ImageProgress{Layer: "sha256:l1", Status: "downloading", Current: 5, Total: 10})
	img := driver.ImageInfo{ID: "sha256:0123456789abcdef", Refs: []string{ref}, Size: 10, Created: time.Unix(1e9, 0)}
	d.images = append(d.images, img)
	return img, nil
}

func (d *imager) ListImages(context.Context) ([]driver.ImageInfo, error) { return d.images, nil }

func (d *imager) RemoveImage(_ context.Context, ref string) (driver.ImageInfo, error) {
	d.removed = append(d.removed, ref)
	switch ref {
	case "used":
		return driver.ImageInfo{}, errdefs.FailedPrecondition("image %q is used by sandbox a", ref)
	case "gone":
		return driver.ImageInfo{}, errdefs.NotFound("image %q not found", ref)
	}
	return driver.ImageInfo{ID: "sha256:1", Refs: []string{ref}}, nil
}

func (d *imager) PruneImages(context.Context) ([]driver.ImageInfo, error) {
	return []driver.ImageInfo{{ID: "sha256:1", Size: 100}, {ID: "sha256:2", Size: 23}}, nil
}

func TestImagesOnAnImager(t *testing.T) {
	drv := &imager{Driver: newFake(t)}
	api := manager(t, drv, "if_not_present")
	ctx := context.Background()

	msgs, err := pull(api, &corralv1.PullImageRequest{Image: "busybox"})
	if err != nil || len(msgs) != 3 {
		t.Fatalf("pull = %v, %v; want two progress messages and the image", msgs, err)
	}
	if p := msgs[1]; p.Layer != "sha256:l1" || p.Status != "downloading" || p.Current != 5 || p.Total != 10 {
		t.Errorf("progress = %v", p)
	}
	if last := msgs[2].GetImage(); last.GetId() != "sha256:0123456789abcdef" || last.GetSize() != 10 || last.GetCreated().AsTime().Unix() != 1e9 {
		t.Errorf("the last message = %v, want the image", msgs[2])
	}
	if _, err := pull(api, &corralv1.PullImageRequest{Image: "nosuch"}); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "nosuch") {
		t.Errorf("pull nosuch = %v, want InvalidArgument naming it", err)
	}

	// if_needed: busybox is there (as docker.io/library/busybox:latest is
	// busybox), so nothing is pulled; alpine is not
	drv.pulled = nil
	drv.images[0].Refs = []string{"docker.io/library/busybox:latest"}
	if msgs, err := pull(api, &corralv1.PullImageRequest{Image: "busybox", IfNeeded: true}); err != nil || len(msgs) != 0 {
		t.Errorf("pull if needed of a present image = %v, %v; want an empty stream", msgs, err)
	}
	if msgs, err := pull(api, &corralv1.PullImageRequest{Image: "alpine", IfNeeded: true}); err != nil || len(msgs) != 3 {
		t.Errorf("pull if needed of a missing image = %v, %v; want a pull", msgs, err)
	}
	if len(drv.pulled) != 1 || drv.pulled[0] != "alpine" {
		t.Errorf("pulled %v, want [alpine]", drv.pulled)
	}

	// input is bounded before the driver hears of it
	drv.pulled = nil
	for _, bad := range []string{"", strings.Repeat("a", lifecycle.MaxImageBytes+1), "busy\nbox", "busy box"} {
		if _, err := pull(api, &corralv1.PullImageRequest{Image: bad}); status.Code(err) != codes.InvalidArgument {
			t.Errorf("pull %.20q = %v, want InvalidArgument", bad, err)
		}
		if _, err := api.RemoveImage(ctx, &corralv1.RemoveImageRequest{Image: bad}); status.Code(err) != codes.InvalidArgument {
			t.Errorf("rm %.20q = %v, want InvalidArgument", bad, err)
		}
	}
	if len(drv.pulled)+len(drv.removed) != 0 {
		t.Errorf("the driver was asked to pull %v and remove %v", drv.pulled, drv.removed)
	}

	list, err := api.ListImages(ctx, &corralv1.ListImagesRequest{})
	if err != nil || len(list.Images) != 2 || list.Images[1].Refs[0] != "alpine" {
		t.Errorf("list = %v, %v", list, err)
	}
	if _, err := api.RemoveImage(ctx, &corralv1.RemoveImageRequest{Image: "used"}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("rm of a used image = %v, want FailedPrecondition", err)
	}
	if _, err := api.RemoveImage(ctx, &corralv1.RemoveImageRequest{Image: "gone"}); status.Code(err) != codes.NotFound {
		t.Errorf("rm of a missing image = %v, want NotFound", err)
	}
	if img, err := api.RemoveImage(ctx, &corralv1.RemoveImageRequest{Image: "old"}); err != nil || img.Refs[0] != "old" {
		t.Errorf("rm old = %v, %v", img, err)
	}
	pruned, err := api.PruneImages(ctx, &corralv1.PruneImagesRequest{})
	if err != nil || len(pruned.Removed) != 2 || pruned.SpaceFreed != 123 {
		t.Errorf("prune = %v, %v; want two images and 123 bytes freed", pruned, err)
	}
}

// With image_pull_policy never, a pull ahead of a create pulls nothing:
// the create reports a missing image as it always does.
func TestPullIfNeededFollowsThePolicy(t *testing.T) {
	drv := &imager{Driver: newFake(t)}
	api := manager(t, drv, "never")
	if msgs, err := pull(api, &corralv1.PullImageRequest{Image: "alpine", IfNeeded: true}); err != nil || len(msgs) != 0 || len(drv.pulled) != 0 {
		t.Errorf("pull if needed under never = %v, %v, pulled %v; want nothing", msgs, err, drv.pulled)
	}
	api = manager(t, drv, "always")
	drv.images = []driver.ImageInfo{{ID: "sha256:1", Refs: []string{"alpine"}}}
	if _, err := pull(api, &corralv1.PullImageRequest{Image: "alpine", IfNeeded: true}); err != nil || len(drv.pulled) != 1 {
		t.Errorf("pull if needed under always = %v, pulled %v; want a pull of a present image", err, drv.pulled)
	}
}
