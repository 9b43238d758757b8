package docker

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/moby/moby/client"

	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/driver/drivertest"
	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/testenv"
)

func tagOf(t *testing.T, img v1.Image) string {
	t.Helper()
	tag, err := localTag(img)
	if err != nil {
		t.Fatal(err)
	}
	return tag
}

// runFrom runs a sandbox of image through the driver, checks that a
// command runs in it and returns its id; the sandbox is deleted when the
// test ends.
func runFrom(t *testing.T, d *Driver, image string) string {
	t.Helper()
	id := sandbox.NewID()
	t.Cleanup(func() { _ = d.Delete(context.Background(), id) })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	spec := driver.Spec{ID: id, Name: "img", Generation: 1, Image: image, Command: []string{"sleep", "3600"},
		Policy: drivertest.MustPolicy(t, "")}
	if err := d.Create(ctx, spec); err != nil {
		t.Fatalf("create from %s: %v", image, err)
	}
	if err := d.Start(ctx, driver.Ref{ID: id, Generation: 1}); err != nil {
		t.Fatalf("start from %s: %v", image, err)
	}
	if code, out, _ := execIn(t, d, id, "echo", "ran"); code != 0 || out != "ran\n" {
		t.Fatalf("exec in a sandbox of %s: %d %q", image, code, out)
	}
	return id
}

func hasImage(t *testing.T, d *Driver, ref string) bool {
	t.Helper()
	_, err := d.api.ImageInspect(context.Background(), ref)
	if err != nil && !cerrdefs.IsNotFound(err) {
		t.Fatal(err)
	}
	return err == nil
}

func findImage(list []driver.ImageInfo, ref string) *driver.ImageInfo {
	for i := range list {
		if slices.Contains(list[i].Refs, ref) {
			return &list[i]
		}
	}
	return nil
}

func removeTag(d *Driver, ref string) {
	_, _ = d.api.ImageRemove(context.Background(), ref, client.ImageRemoveOptions{Force: true, PruneChildren: true})
}

// A docker save archive and an OCI layout run on Docker (whose pull
// policy here is never: a local file is not a pull), are listed with
// their sandboxes, cannot be removed while used, and prune removes them
// once unused, never the test image.
func TestFileImagesRunListAndPrune(t *testing.T) {
	d := newTestDriver(t, "corral.test."+sandbox.ShortID(sandbox.NewID()))
	ctx := context.Background()
	saved := testenv.SavedTestImage(t)
	img := testenv.UniqueTestImage(t, saved, 0)
	tag := tagOf(t, img)
	t.Cleanup(func() { removeTag(d, tag) })
	archive, dir := testenv.WriteArchive(t, img), testenv.WriteLayout(t, img)

	id := runFrom(t, d, archivePrefix+archive)
	if !hasImage(t, d, tag) {
		t.Fatalf("after a sandbox of the archive, the engine lacks %s", tag)
	}
	list, err := d.ListImages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := findImage(list, tag); got == nil || got.Sandboxes != 1 || got.Size <= 0 {
		t.Fatalf("list: %s is %+v; want it with one sandbox", tag, got)
	} else if base := findImage(list, testenv.ListedTestImage()); base == nil {
		t.Fatalf("list lacks %s: %+v", testenv.ListedTestImage(), list)
	}
	_, err = d.RemoveImage(ctx, archivePrefix+archive)
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), archive) {
		t.Fatalf("remove of a used image = %v, want FailedPrecondition naming it", err)
	}
	pruned, err := d.PruneImages(ctx)
	if err != nil || findImage(pruned, tag) != nil || !hasImage(t, d, tag) {
		t.Fatalf("prune while used = %+v, %v; it must keep %s", pruned, err, tag)
	}
	if err := d.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	pruned, err = d.PruneImages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := findImage(pruned, tag); got == nil || got.Size <= 0 || hasImage(t, d, tag) {
		t.Fatalf("prune once unused = %+v; want %s removed, with its size", pruned, tag)
	}
	if findImage(pruned, testenv.ListedTestImage()) != nil || !hasImage(t, d, testenv.TestImage) {
		t.Fatalf("prune removed %s, which corral did not load", testenv.TestImage)
	}

	// the layout of the same image loads it again, as the same tag
	id = runFrom(t, d, ociPrefix+dir)
	if !hasImage(t, d, tag) {
		t.Fatalf("after a sandbox of the layout, the engine lacks %s", tag)
	}
	if err := d.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	removed, err := d.RemoveImage(ctx, ociPrefix+dir)
	if err != nil || !slices.Contains(removed.Refs, tag) || hasImage(t, d, tag) {
		t.Fatalf("remove of the layout's image = %+v, %v; want %s gone", removed, err, tag)
	}
	if _, err := d.RemoveImage(ctx, ociPrefix+dir); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("a second remove = %v, want NotFound", err)
	}
}

// A pull of a file image reports its steps and describes the image; the
// test image's own archive loads as the same image, and prune only takes
// corral's tag off it.
func TestPullFileImage(t *testing.T) {
	d := newTestDriver(t, "corral.test."+sandbox.ShortID(sandbox.NewID()))
	ctx := context.Background()
	saved := testenv.SavedTestImage(t)
	img, err := tarball.ImageFromPath(saved, nil)
	if err != nil {
		t.Fatal(err)
	}
	tag := tagOf(t, img)
	removeTag(d, tag)
	t.Cleanup(func() { removeTag(d, tag) })
	var steps []string
	info, err := d.PullImage(ctx, archivePrefix+saved, func(p driver.ImageProgress) { steps = append(steps, p.Status) })
	if err != nil {
		t.Fatal(err)
	}
	base, err := d.api.ImageInspect(ctx, testenv.TestImage)
	if err != nil {
		t.Fatal(err)
	}
	if info.ID != base.ID || !slices.Contains(info.Refs, tag) || !slices.Contains(info.Refs, testenv.ListedTestImage()) || info.Created.IsZero() {
		t.Fatalf("pull = %+v; want the test image (%s), tagged %s too", info, base.ID, tag)
	}
	if steps[0] != "resolving" || steps[len(steps)-1] != "done" {
		t.Fatalf("steps = %v, want resolving first and done last", steps)
	}
	steps = nil
	if _, err := d.PullImage(ctx, archivePrefix+saved, func(p driver.ImageProgress) { steps = append(steps, p.Status) }); err != nil || !slices.Contains(steps, "cached") {
		t.Fatalf("a second pull = %v, steps %v; want it cached", err, steps)
	}
	pruned, err := d.PruneImages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := findImage(pruned, tag); got != nil && got.Size != 0 {
		t.Fatalf("prune of a tag on the test image says it freed %d bytes", got.Size)
	}
	if !hasImage(t, d, testenv.TestImage) {
		t.Fatalf("prune removed %s", testenv.TestImage)
	}
}

// File images that are not there, or not absolute, are refused naming
// them, before anything is recorded.
func TestFileImagesAreValidated(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f.tar")
	if err := os.WriteFile(file, []byte("not an archive"), 0o644); err != nil {
		t.Fatal(err)
	}
	d := &Driver{}
	for image, want := range map[string]string{
		archivePrefix + "rel/x.tar":          "not an absolute path",
		archivePrefix + dir + "/missing.tar": "does not exist",
		archivePrefix + dir:                  "is not a file",
		ociPrefix + file:                     "is not a directory",
		ociPrefix:                            "not an absolute path",
	} {
		err := d.Validate(driver.Spec{Name: "x", Image: image})
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), image) || !strings.Contains(err.Error(), want) {
			t.Errorf("validate %q = %v; want InvalidArgument naming it, %q", image, err, want)
		}
	}
	if err := d.Validate(driver.Spec{Name: "x", Image: archivePrefix + file}); err != nil {
		t.Errorf("validate of an existing file = %v", err)
	}
	if _, err := openLocal(archivePrefix + file); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), file) {
		t.Errorf("open of a file that is no archive = %v, want InvalidArgument naming it", err)
	}
	if _, err := openLocal(ociPrefix + dir); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), dir) {
		t.Errorf("open of a directory that is no layout = %v, want InvalidArgument naming it", err)
	}
}

// A pull from a registry (ggcr's, on 127.0.0.1, which Docker reaches over
// plain HTTP) reports the engine's progress by layer and brings the image.
func TestPullFromRegistry(t *testing.T) {
	d := newTestDriver(t, "corral.test."+sandbox.ShortID(sandbox.NewID()))
	testenv.SkipOnPodman(t, testenv.PodmanRegistryTLS)
	ctx := context.Background()
	img := testenv.UniqueTestImage(t, testenv.SavedTestImage(t), 256<<10)
	ref := testenv.ServeImage(t, "corral-test/pulled:"+sandbox.ShortID(sandbox.NewID()), img)
	host, _, _ := strings.Cut(ref, "/")
	t.Cleanup(func() { removeTag(d, ref) })
	var (
		mu    sync.Mutex
		steps []driver.ImageProgress
	)
	info, err := d.PullImage(ctx, ref, func(p driver.ImageProgress) {
		mu.Lock()
		defer mu.Unlock()
		steps = append(steps, p)
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := img.ConfigName()
	if info.ID != cfg.String() || !slices.Contains(info.Refs, ref) {
		t.Fatalf("pull = %+v, want %s named %s", info, cfg, ref)
	}
	downloaded := slices.ContainsFunc(steps, func(p driver.ImageProgress) bool {
		return p.Layer != "" && (p.Status == "downloading" || p.Status == "done")
	})
	t.Logf("%d steps, the first %+v, the last %+v", len(steps), steps[0], steps[len(steps)-1])
	if !downloaded || !hasImage(t, d, ref) {
		t.Fatalf("steps = %+v; want a layer's download among them", steps)
	}
	if _, err := d.PullImage(ctx, host+"/corral-test/nosuch:1", nil); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "nosuch") {
		t.Fatalf("pull of a missing image = %v, want InvalidArgument naming it", err)
	}
}
