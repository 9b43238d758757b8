package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/moby/moby/client"

	"github.com/corral-sandbox/corral/internal/testenv"
)

// archiveTag is the engine tag corral loads img as.
func archiveTag(t *testing.T, img v1.Image) string {
	t.Helper()
	cfg, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	tag := "corral.local/archive:" + cfg.Hex[:12]
	t.Cleanup(func() { forceRemoveImage(t, tag) })
	return tag
}

func forceRemoveImage(t *testing.T, ref string) {
	_, _ = engine(t).ImageRemove(context.Background(), ref, client.ImageRemoveOptions{Force: true, PruneChildren: true})
}

// imageRows are the rows of `corral image list` whose REF is ref.
func imageRows(t *testing.T, home, ref string) []string {
	t.Helper()
	var rows []string
	for _, line := range strings.Split(mustCorral(t, home, "image", "list"), "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == ref {
			rows = append(rows, line)
		}
	}
	return rows
}

// corral image pull, list, rm and prune on Docker, with file images and a
// registry; sandbox create --image shows the pull it needs.
func TestDockerImageCommands(t *testing.T) {
	testenv.RequireDocker(t)
	home, label := t.TempDir(), newLabel(t)
	dockerGateway(t, home, label, "--image-pull-policy", "if_not_present")
	saved := testenv.SavedTestImage(t)
	first, second := testenv.UniqueTestImage(t, saved, 0), testenv.UniqueTestImage(t, saved, 0)
	firstTag, secondTag := archiveTag(t, first), archiveTag(t, second)
	archive, layoutDir := testenv.WriteArchive(t, first), testenv.WriteLayout(t, second)

	out, errOut, code := corral(t, home, "image", "pull", "docker-archive:"+archive)
	if want, _ := first.ConfigName(); code != 0 || out != want.String()+"\n" || !strings.Contains(errOut, "resolving\n") || !strings.HasSuffix(errOut, "done\n") {
		t.Fatalf("image pull of the archive: exit %d, stdout %q, stderr %q; want its id and the steps", code, out, errOut)
	}
	if rows := imageRows(t, home, firstTag); len(rows) != 1 || !strings.HasSuffix(rows[0], " 0") {
		t.Fatalf("image list rows of %s: %q; want one, with no sandbox", firstTag, rows)
	}
	if rows := imageRows(t, home, testenv.ListedTestImage()); len(rows) != 1 {
		t.Fatalf("image list lacks %s: %q", testenv.ListedTestImage(), rows)
	}
	var views []struct {
		ID        string   `json:"id"`
		Refs      []string `json:"refs"`
		Size      int64    `json:"size"`
		Sandboxes int      `json:"sandboxes"`
	}
	if err := json.Unmarshal([]byte(mustCorral(t, home, "image", "ls", "-o", "json")), &views); err != nil || len(views) == 0 {
		t.Fatalf("image ls -o json: %v, %v", views, err)
	}

	// a create of the layout loads it first, showing that on stderr
	out, errOut, code = corral(t, home, "sandbox", "create", "--name", "fromoci", "--image", "oci:"+layoutDir, "--", "sleep", "1000")
	if code != 0 || !strings.Contains(errOut, "resolving\n") || !strings.Contains(errOut, "done\n") {
		t.Fatalf("create from the layout: exit %d: %s%s; want the load's progress on stderr", code, out, errOut)
	}
	if rows := imageRows(t, home, secondTag); len(rows) != 1 || !strings.HasSuffix(rows[0], " 1") {
		t.Fatalf("image list rows of %s: %q; want one, with one sandbox", secondTag, rows)
	}
	out, errOut, code = corral(t, home, "image", "rm", "oci:"+layoutDir)
	if code != 1 || !strings.Contains(errOut, "is used by container corral-fromoci-") {
		t.Fatalf("image rm of a used image: exit %d: %s%s", code, out, errOut)
	}

	out = mustCorral(t, home, "image", "prune")
	if !strings.Contains(out, "removed "+firstTag+" ") || strings.Contains(out, secondTag) || strings.Contains(out, "space freed: 0B") {
		t.Fatalf("image prune:\n%s\nwant %s (unused) removed with the space it took, and %s (used) kept", out, firstTag, secondTag)
	}
	if rows := imageRows(t, home, testenv.ListedTestImage()); len(rows) != 1 {
		t.Fatalf("prune removed %s", testenv.TestImage)
	}
	mustCorral(t, home, "sandbox", "delete", "fromoci")
	out, errOut, code = corral(t, home, "image", "rm", "oci:"+layoutDir, "corral-test/nosuch:1")
	if code != 1 || !strings.Contains(out, "removed oci:"+layoutDir+" ") || !strings.Contains(errOut, `image "corral-test/nosuch:1" not found`) {
		t.Fatalf("image rm of an unused and a missing image: exit %d: %s%s; want the first removed, the second not found", code, out, errOut)
	}
	if rows := imageRows(t, home, secondTag); len(rows) != 0 {
		t.Fatalf("image list after rm: %q", rows)
	}
}

// A pull from a registry shows a line per layer step, not one per byte;
// a pull that fails aborts the create before any sandbox is recorded.
func TestDockerImagePullFromRegistry(t *testing.T) {
	testenv.RequireDocker(t)
	testenv.SkipOnPodman(t, testenv.PodmanRegistryTLS)
	home, label := t.TempDir(), newLabel(t)
	dockerGateway(t, home, label, "--image-pull-policy", "if_not_present")
	img := testenv.UniqueTestImage(t, testenv.SavedTestImage(t), 4<<20)
	ref := testenv.ServeImage(t, "corral-test/pulled:"+label[len(label)-10:], img)
	host, _, _ := strings.Cut(ref, "/")
	t.Cleanup(func() { forceRemoveImage(t, ref) })

	out, errOut, code := corral(t, home, "image", "pull", ref)
	lines := strings.Split(strings.TrimSpace(errOut), "\n")
	if code != 0 || !strings.HasPrefix(out, "sha256:") || !strings.Contains(errOut, ": downloading") || len(lines) > 40 {
		t.Fatalf("image pull %s: exit %d, stdout %q, %d lines on stderr:\n%s", ref, code, out, len(lines), errOut)
	}
	t.Logf("image pull %s:\n%s", ref, errOut)
	if rows := imageRows(t, home, ref); len(rows) != 1 {
		t.Fatalf("image list after the pull: %q", rows)
	}
	out, errOut, code = corral(t, home, "sandbox", "create", "--name", "nosuch", "--image", host+"/corral-test/nosuch:1", "--", "sleep", "1")
	if code != 1 || !strings.Contains(errOut, "corral-test/nosuch:1") {
		t.Fatalf("create of an image that cannot be pulled: exit %d: %s%s", code, out, errOut)
	}
	if out := mustCorral(t, home, "sandbox", "list"); strings.Contains(out, "nosuch") {
		t.Fatalf("a failed pull made a record:\n%s", out)
	}
	mustCorral(t, home, "image", "rm", ref)
	if rows := imageRows(t, home, ref); len(rows) != 0 {
		t.Fatalf("image list after rm: %q", rows)
	}
}

// On a driver that keeps no images (the fake), a create with --image goes
// on without a pull, and the image commands say why they cannot work.
func TestCreateWithImageOnADriverWithoutImages(t *testing.T) {
	home := t.TempDir()
	startGateway(t, home)
	out, errOut, code := corral(t, home, "sandbox", "create", "--name", "a", "--image", "busybox:latest", "--", "sleep", "1d")
	if code != 0 || len(strings.TrimSpace(out)) != 32 {
		t.Fatalf("create --image on the fake driver: exit %d: %s%s", code, out, errOut)
	}
	_, errOut, code = corral(t, home, "image", "list")
	if code != 1 || !strings.Contains(errOut, "the fake driver keeps no images") {
		t.Fatalf("image list on the fake driver: exit %d: %s", code, errOut)
	}
	mustCorral(t, home, "sandbox", "delete", "a")
}
