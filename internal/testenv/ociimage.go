package testenv

import (
	"archive/tar"
	"bytes"
	"crypto/rand"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// ImageTag is the tag of the image TestOCIImage makes.
const ImageTag = "corral-test/probe:1"

// ImageCommand is what the image TestOCIImage makes runs: its entrypoint
// and command.
var ImageCommand = []string{"/bin/sh", "-c", "echo started as $(id -u); exec sleep 1000"}

// ImageProbe is a command whose output shows what a sandbox of that image
// sees of it: user, group, working directory, environment, files, modes,
// ownership, links and whiteouts. The same image must print the same on
// every driver.
var ImageProbe = []string{"sh", "-c", `id -u; id -g; pwd; echo "$GREETING"; cat /app/marker /app/marker.link /home/app/note; ` +
	`ls /gone 2>&1; ls /opq; readlink /app/abs; stat -c '%u:%g %a %n' /home/app /home/app/note /app /bin/busybox`}

// ImageProbeWant is ImageProbe's output in a sandbox of that image whose
// policy names no user.
const ImageProbeWant = "1001\n1001\n/app\nhi\nlayer two\nlayer two\nowned by app\n" +
	"ls: /gone: No such file or directory\nnew\n/etc/passwd\n" +
	"1001:1001 750 /home/app\n1001:1001 640 /home/app/note\n0:0 755 /app\n0:0 755 /bin/busybox\n"

// OCIImage is a test image in the forms corral reads.
type OCIImage struct {
	Image         v1.Image
	DockerArchive string // a `docker save` tarball
	Layout        string // an OCI image layout directory
}

// TestOCIImage builds, under dir, a two-layer image on the host's static
// busybox (Debian's busybox-static, every applet linked), with a user "app" (1001), WORKDIR
// /app, an environment, a hard link, an absolute symlink, a whiteout and
// an opaque directory, plus filler bytes of random content in a third
// layer when filler > 0 (to measure unpacking).
func TestOCIImage(dir string, filler int64) (OCIImage, error) {
	busybox, err := os.ReadFile("/bin/busybox")
	if err != nil {
		return OCIImage{}, fmt.Errorf("the test image needs Debian's busybox-static: %w", err)
	}
	base := []tarEntry{
		dirEntry("bin", 0, 0o755), {name: "bin/busybox", mode: 0o755, body: busybox},
		dirEntry("etc", 0, 0o755),
		{name: "etc/passwd", mode: 0o644, body: []byte("root:x:0:0:root:/root:/bin/sh\napp:x:1001:1001:app:/home/app:/bin/sh\n")},
		{name: "etc/group", mode: 0o644, body: []byte("root:x:0:\napp:x:1001:\n")},
		dirEntry("tmp", 0, 0o1777), dirEntry("gone", 0, 0o755), {name: "gone/file", mode: 0o644, body: []byte("x")},
		dirEntry("opq", 0, 0o755), {name: "opq/old", mode: 0o644, body: []byte("old")},
	}
	applets, err := exec.Command("/bin/busybox", "--list").Output()
	if err != nil {
		return OCIImage{}, fmt.Errorf("list busybox's applets: %w", err)
	}
	for _, tool := range strings.Fields(string(applets)) {
		if tool != "busybox" {
			base = append(base, tarEntry{name: "bin/" + tool, link: "busybox", typ: tar.TypeSymlink})
		}
	}
	top := []tarEntry{
		dirEntry("home", 0, 0o755), {name: "home/app", typ: tar.TypeDir, mode: 0o750, uid: 1001},
		{name: "home/app/note", mode: 0o640, uid: 1001, body: []byte("owned by app\n")},
		dirEntry("app", 0, 0o755), {name: "app/marker", mode: 0o644, body: []byte("layer two\n")},
		{name: "app/marker.link", typ: tar.TypeLink, link: "app/marker", mode: 0o644}, // as tar writes it: the file's mode
		{name: "app/abs", typ: tar.TypeSymlink, link: "/etc/passwd"},
		{name: ".wh.gone", mode: 0o644}, {name: "opq/.wh..wh..opq", mode: 0o644}, {name: "opq/new", mode: 0o644, body: []byte("new")},
	}
	layers := [][]tarEntry{base, top}
	if filler > 0 {
		data := make([]byte, filler)
		_, _ = rand.Read(data)
		layers = append(layers, []tarEntry{dirEntry("filler", 0, 0o755), {name: "filler/random", mode: 0o644, body: data}})
	}
	img := empty.Image
	for _, entries := range layers {
		data, err := tarOf(entries)
		if err != nil {
			return OCIImage{}, err
		}
		l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
		if err != nil {
			return OCIImage{}, err
		}
		if img, err = mutate.AppendLayers(img, l); err != nil {
			return OCIImage{}, err
		}
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return OCIImage{}, err
	}
	cfg = cfg.DeepCopy()
	cfg.Architecture, cfg.OS = "amd64", "linux"
	cfg.Config.Entrypoint, cfg.Config.Cmd = ImageCommand[:2], ImageCommand[2:]
	cfg.Config.Env = []string{"PATH=/bin", "GREETING=hi"}
	cfg.Config.WorkingDir, cfg.Config.User = "/app", "app"
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return OCIImage{}, err
	}
	out := OCIImage{Image: img, DockerArchive: filepath.Join(dir, "image.tar"), Layout: filepath.Join(dir, "layout")}
	tag, err := name.NewTag(ImageTag)
	if err != nil {
		return OCIImage{}, err
	}
	if err := tarball.WriteToFile(out.DockerArchive, tag, img); err != nil {
		return OCIImage{}, err
	}
	p, err := layout.Write(out.Layout, empty.Index)
	if err != nil {
		return OCIImage{}, err
	}
	return out, p.AppendImage(img)
}

type tarEntry struct {
	name, link string
	typ        byte
	mode       int64
	uid        int
	body       []byte
}

func dirEntry(name string, uid int, mode int64) tarEntry {
	return tarEntry{name: name, typ: tar.TypeDir, mode: mode, uid: uid}
}

func tarOf(entries []tarEntry) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	when := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, e := range entries {
		typ := e.typ
		if typ == 0 {
			typ = tar.TypeReg
		}
		h := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: typ, Mode: e.mode, Uid: e.uid, Gid: e.uid,
			Size: int64(len(e.body)), ModTime: when, Format: tar.FormatPAX}
		if typ != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
