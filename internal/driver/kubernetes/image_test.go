package kubernetes

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// The supervisor image holds the binary given, whole and executable, at
// the path the Pods' init container runs, under the tag given, for this
// build's platform.
func TestSupervisorImageHoldsTheBinary(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "corral-supervise")
	want := []byte("\x7fELF not really, but these bytes")
	if err := os.WriteFile(bin, want, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "image.tar")
	if err := WriteSupervisorImage(path, "example.test/corral-supervise:v1", bin); err != nil {
		t.Fatal(err)
	}
	tag, _ := name.NewTag("example.test/corral-supervise:v1")
	img, err := tarball.ImageFromPath(path, &tag)
	if err != nil {
		t.Fatalf("the archive has no image of its tag: %v", err)
	}
	if cf, err := img.ConfigFile(); err != nil || cf.OS != "linux" || cf.Architecture != runtime.GOARCH || cf.Config.Entrypoint[0] != imageSupervisor {
		t.Fatalf("config %+v, %v; want linux/%s, entrypoint %s", cf, err, runtime.GOARCH, imageSupervisor)
	}
	tr := tar.NewReader(mutate.Extract(img))
	hdr, err := tr.Next()
	if err != nil || "/"+hdr.Name != imageSupervisor || hdr.Mode != 0o555 {
		t.Fatalf("first file %+v, %v; want %s, mode 0555", hdr, err, imageSupervisor)
	}
	if got, _ := io.ReadAll(tr); !bytes.Equal(got, want) {
		t.Errorf("the file holds %q, want the binary's bytes", got)
	}
	if err := WriteSupervisorImage(path, "Not A Tag", bin); err == nil {
		t.Error("an invalid tag was taken")
	}
}
