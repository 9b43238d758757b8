package main

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
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
// serves on loopback.
func testImageRefs(t *testing.T) map[string]string {
	t.Helper()
	img, err := testenv.TestOCIImage(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	return map[string]string{
		"archive":  "docker-archive:" + img.DockerArchive,
		"layout":   "oci:" + img.Layout,
		"registry": testenv.ServeImage(t, "corral/probe:1", img.Image),
	}
}

// The same image shows the same files, user, working directory,
// environment and entrypoint on every driver: ImageProbeWant, from each of
// its forms.
func TestImageOnNative(t *testing.T) {
	testenv.RequireRoot(t)
	home := t.TempDir()
	nativeGateway(t, home)
	probeImage(t, home, testImageRefs(t))
}

func TestImageOnDocker(t *testing.T) {
	testenv.RequireDocker(t)
	home := t.TempDir()
	dockerGateway(t, home, newLabel(t), "--image-pull-policy", "if_not_present")
	probeImage(t, home, testImageRefs(t))
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
