package main

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/corral-sandbox/corral/internal/testenv"
)

// testImageRefs makes the test image and returns the names it goes by: a
// `docker save` archive, an OCI layout, and a registry that the test
// serves on loopback. With engine set, what a Docker gateway puts into
// the engine from them is removed when the test ends: the archive's tag
// and the registry's name (of its port: a new one each run).
func testImageRefs(t *testing.T, engine bool) map[string]string {
	t.Helper()
	img, err := testenv.TestOCIImage(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	refs := map[string]string{
		"archive":  "docker-archive:" + img.DockerArchive,
		"layout":   "oci:" + img.Layout,
		"registry": testenv.ServeImage(t, "corral/probe:1", img.Image),
	}
	if engine {
		archiveTag(t, img.Image)
		t.Cleanup(func() { forceRemoveImage(t, refs["registry"]) })
	}
	return refs
}

// The same image shows the same files, user, working directory,
// environment and entrypoint on every driver: ImageProbeWant, from each of
// its forms.
func TestImageOnNative(t *testing.T) {
	testenv.RequireRoot(t)
	home := t.TempDir()
	nativeGateway(t, home)
	probeImage(t, home, testImageRefs(t, false))
}

func TestImageOnDocker(t *testing.T) {
	testenv.RequireDocker(t)
	home := t.TempDir()
	dockerGateway(t, home, newLabel(t), "--image-pull-policy", "if_not_present")
	refs := testImageRefs(t, true)
	if testenv.Podman() {
		t.Logf("not the registry's image on Podman: %s", testenv.PodmanRegistryTLS)
		delete(refs, "registry")
	}
	probeImage(t, home, refs)
}

// probeImage runs a sandbox of each ref with no command (the image's
// entrypoint and command run) and the probe in it.
func probeImage(t *testing.T, home string, refs map[string]string) {
	t.Helper()
	for form, ref := range refs {
		box := "probe-" + form
		mustCorral(t, home, "sandbox", "create", "--name", box, "--image", ref)
		out, errOut, code := corral(t, home, append([]string{"sandbox", "exec", box, "--"}, testenv.ImageProbe...)...)
		if code != 0 || out != testenv.ImageProbeWant {
			t.Errorf("image %s: exec exited %d\nstdout:\n%s\nstderr: %s\nwant stdout:\n%s", ref, code, out, errOut, testenv.ImageProbeWant)
		}
		testenv.Eventually(t, 10*time.Second, func() error {
			if logs := mustCorral(t, home, "sandbox", "logs", box); !strings.Contains(logs, "started as 1001") {
				return fmt.Errorf("logs of %s: %q", box, logs)
			}
			return nil
		})
		mustCorral(t, home, "sandbox", "delete", box)
	}
}

// TestMaliciousImageIsRefused: a layer that writes through an absolute
// symlink to a host directory is refused with the reason, and the host
// directory is untouched.
func TestMaliciousImageIsRefused(t *testing.T) {
	testenv.RequireRoot(t)
	home, target := t.TempDir(), t.TempDir()
	nativeGateway(t, home)
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	for _, h := range []*tar.Header{
		{Name: "etc", Typeflag: tar.TypeSymlink, Linkname: target},
		{Name: "etc/passwd", Typeflag: tar.TypeReg, Mode: 0o644, Size: 4},
	} {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			if _, err := tw.Write([]byte("evil")); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(layer.Bytes())), nil })
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, l)
	if err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(t.TempDir(), "evil.tar")
	if err := tarball.WriteToFile(archive, name.MustParseReference("corral-test/evil:1"), img); err != nil {
		t.Fatal(err)
	}
	_, errOut, code := corral(t, home, "sandbox", "create", "--name", "evil", "--image", "docker-archive:"+archive, "--", "true")
	if code == 0 || !strings.Contains(errOut, "etc/passwd") || !strings.Contains(errOut, "symlink") {
		t.Errorf("create of a malicious image: exit %d, stderr %q; want a failure naming the entry and the symlink", code, errOut)
	}
	if entries, err := os.ReadDir(target); err != nil || len(entries) > 0 {
		t.Errorf("the host directory the layer pointed at now holds %v (%v)", entries, err)
	}
	// The pull before the create refused it: nothing was recorded.
	if _, errOut, code := corral(t, home, "sandbox", "get", "evil"); code == 0 || !strings.Contains(errOut, "not found") {
		t.Errorf("get of the refused sandbox: exit %d, %q; want not found", code, errOut)
	}
}

// layerInodes maps each unpacked layer directory of the native driver's
// cache to its inode, which a second unpack would change.
func layerInodes(t *testing.T, home string) map[string]uint64 {
	t.Helper()
	dir := filepath.Join(home, "images", "layers", "sha256")
	entries, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	out := map[string]uint64{}
	for _, e := range entries {
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join(dir, e.Name()), &st); err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = st.Ino
	}
	return out
}

// On native, a second sandbox of an image unpacks
// nothing (every layer "cached", the cache's directories the same ones),
// and `image prune` removes only the image no sandbox uses, keeping the
// layers it shares with one that is used.
func TestNativeImageCacheAndPrune(t *testing.T) {
	testenv.RequireRoot(t)
	home := t.TempDir()
	nativeGateway(t, home)
	used, err := testenv.TestOCIImage(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	unused, err := testenv.TestOCIImage(t.TempDir(), 4096) // the same two layers, and one of its own
	if err != nil {
		t.Fatal(err)
	}
	ref, unusedRef := "docker-archive:"+used.DockerArchive, "oci:"+unused.Layout

	start := time.Now()
	_, errOut, code := corral(t, home, "sandbox", "create", "--name", "first", "--image", ref, "--", "sleep", "1d")
	firstTook := time.Since(start)
	if code != 0 || !strings.Contains(errOut, "unpacking") {
		t.Fatalf("first create: exit %d, stderr %q; want the layers unpacked", code, errOut)
	}
	before := layerInodes(t, home)
	start = time.Now()
	_, errOut, code = corral(t, home, "sandbox", "create", "--name", "second", "--image", ref, "--", "sleep", "1d")
	secondTook := time.Since(start)
	if code != 0 || strings.Contains(errOut, "unpacking") || strings.Contains(errOut, "downloading") {
		t.Fatalf("second create: exit %d, stderr %q; want no layer unpacked again", code, errOut)
	}
	if after := layerInodes(t, home); len(before) != 2 || fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("layer directories before the second create %v, after %v; want the same two", before, after)
	}
	t.Logf("create→ready: first (unpack) %s, second (cache hit) %s", firstTook.Round(time.Millisecond), secondTook.Round(time.Millisecond))

	unusedID := strings.TrimSpace(mustCorral(t, home, "image", "pull", unusedRef))
	usedID, _ := used.Image.ConfigName()
	if n := len(layerInodes(t, home)); n != 3 {
		t.Fatalf("%d layers cached after the second image's pull; want 3 (two shared)", n)
	}
	out := mustCorral(t, home, "image", "prune")
	if !strings.Contains(out, unusedID[len("sha256:"):][:12]) || strings.Contains(out, usedID.Hex[:12]) {
		t.Fatalf("image prune with %s in use:\n%s\nwant only %s removed", usedID.Hex[:12], out, unusedID)
	}
	if after := layerInodes(t, home); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("layers after the prune %v; want the used image's two, untouched: %v", after, before)
	}
	mustCorral(t, home, "sandbox", "exec", "second", "--", "cat", "/app/marker")
	mustCorral(t, home, "sandbox", "delete", "first")
	if out := mustCorral(t, home, "image", "prune"); strings.Contains(out, usedID.Hex[:12]) {
		t.Fatalf("prune removed an image that sandbox second uses:\n%s", out)
	}
	mustCorral(t, home, "sandbox", "delete", "second")
	if out := mustCorral(t, home, "image", "prune"); !strings.Contains(out, usedID.Hex[:12]) {
		t.Fatalf("prune with no sandbox left:\n%s\nwant %s removed", out, usedID.Hex[:12])
	}
	if left := layerInodes(t, home); len(left) != 0 {
		t.Fatalf("layers left after the last prune: %v", left)
	}
}
