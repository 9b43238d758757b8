package images

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/google/go-containerregistry/pkg/compression"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/safetar"
	"github.com/corral-sandbox/corral/internal/testenv"
)

const (
	passwd0 = "root:x:0:0::/root:/bin/sh\n"
	passwd1 = passwd0 + "user:x:1000:1000::/home/user:/bin/sh\n"
	group   = "root:x:0:\n"
)

var richConfig = v1.Config{Entrypoint: []string{"/bin/tool"}, Cmd: []string{"--flag"}, Env: []string{"PATH=/bin", "A=b"},
	WorkingDir: "/home/user", User: "1000:1000"}

// richImage has two layers with every kind of entry: files, modes with a
// setuid bit, owners, symlinks (relative, absolute, one pointing up), a
// hard link, a fifo and a device (skipped), and above them a whiteout, an
// opaque directory and replaced files.
func richImage(t *testing.T) v1.Image {
	owned := func(e ent) ent { e.uid, e.gid = 1000, 1000; return e }
	tool := mkfile("bin/tool", "#!tool\n", 0o4755)
	home := mkdir("home/user/")
	home.mode = 0o700
	lower := tarOf(t,
		mkdir("etc/"), mkfile("etc/passwd", passwd0, 0o644), mkfile("etc/marker", "in the tree\n", 0o644),
		mkdir("bin/"), tool, mksym("bin/sh", "tool"), mklink("bin/tool2", "bin/tool"),
		mkdir("usr/"), mkdir("usr/bin/"), mksym("usr/bin/abs", "/bin/tool"), mksym("up", "../../../../etc/marker"),
		owned(home), owned(mkfile("home/user/file", "mine\n", 0o600)),
		ent{name: "fifo", typ: tar.TypeFifo, mode: 0o644}, ent{name: "null", typ: tar.TypeChar, mode: 0o666},
		mkdir("opq/"), mkfile("opq/a", "lower\n", 0o644), mkfile("gone", "bye\n", 0o644),
	)
	upper := tarOf(t,
		mkfile(".wh.gone", "", 0), mkdir("opq/"), mkfile("opq/.wh..wh..opq", "", 0), mkfile("opq/b", "upper\n", 0o644),
		mkfile("etc/passwd", passwd1, 0o644), mkfile("etc/group", group, 0o644),
	)
	return imageOf(t, richConfig, lower, upper)
}

// The same image pulled from a docker save archive, an OCI layout and a
// registry is the same image, with the same layers, config and files.
func TestPullEveryForm(t *testing.T) {
	testenv.RequireRoot(t)
	img := richImage(t)
	want := wantOf(t, img)
	forms := map[string]string{
		"docker-archive": "docker-archive:" + writeArchive(t, img, "example.com/rich:v1"),
		"oci":            "oci:" + writeLayout(t, img, "v1") + ":v1",
		"registry":       push(t, img, "rich/every-form:v1"),
	}
	for form, ref := range forms {
		t.Run(form, func(t *testing.T) {
			s, _ := newStore(t)
			got, err := s.Pull(context.Background(), ref, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got.ID != want.ID || !slices.Equal(got.Layers, want.Layers) || !slices.Equal(got.Refs, []string{ref}) {
				t.Errorf("pulled %s layers %v refs %v, want %s layers %v", got.ID, got.Layers, got.Refs, want.ID, want.Layers)
			}
			if !equalConfig(got.Config, want.Config) {
				t.Errorf("config %+v, want %+v", got.Config, want.Config)
			}
			// The regular files' bytes, a hard link's once.
			if size := len("#!tool\n" + "mine\n" + passwd0 + "in the tree\n" + "lower\n" + "bye\n" + "upper\n" + passwd1 + group); got.Size != int64(size) {
				t.Errorf("size %d, want %d", got.Size, size)
			}
			checkRichLayers(t, s, got)
			byID, err := s.Get(got.ID[len("sha256:") : len("sha256:")+12])
			if err != nil || byID.ID != got.ID {
				t.Errorf("Get by an id prefix: %v, %v", byID.ID, err)
			}
		})
	}
}

func equalConfig(a, b Config) bool {
	return slices.Equal(a.Entrypoint, b.Entrypoint) && slices.Equal(a.Cmd, b.Cmd) && slices.Equal(a.Env, b.Env) &&
		a.WorkingDir == b.WorkingDir && a.User == b.User
}

// wantOf is what the cache should record for img.
func wantOf(t *testing.T, img v1.Image) Image {
	t.Helper()
	id, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	var layers []string
	for _, d := range cfg.RootFS.DiffIDs {
		layers = append(layers, d.String())
	}
	c := cfg.Config
	return Image{ID: id.String(), Layers: layers, Config: Config{Entrypoint: c.Entrypoint, Cmd: c.Cmd, Env: c.Env, WorkingDir: c.WorkingDir, User: c.User}}
}

// checkRichLayers checks richImage's unpacked layers from the host.
func checkRichLayers(t *testing.T, s *Store, img Image) {
	t.Helper()
	lower, upper := s.LayerPath(img.Layers[0]), s.LayerPath(img.Layers[1])
	content := map[string]string{
		lower + "/etc/passwd": passwd0, lower + "/bin/tool": "#!tool\n", lower + "/home/user/file": "mine\n",
		upper + "/opq/b": "upper\n", upper + "/etc/group": group,
	}
	for p, want := range content {
		if got, err := os.ReadFile(p); err != nil || string(got) != want {
			t.Errorf("%s: %q, %v; want %q", p, got, err, want)
		}
	}
	modes := map[string]os.FileMode{
		lower + "/bin/tool": 0o755 | os.ModeSetuid, lower + "/etc/passwd": 0o644, lower + "/home/user": os.ModeDir | 0o700,
		lower + "/home/user/file": 0o600, lower: os.ModeDir | 0o755, upper + "/gone": os.ModeDevice | os.ModeCharDevice,
	}
	for p, want := range modes {
		fi, err := os.Lstat(p)
		if err != nil || fi.Mode() != want {
			t.Errorf("%s: mode %v, %v; want %v", p, fi.Mode(), err, want)
		}
		if err == nil && p != lower && p != upper+"/gone" && !fi.ModTime().Equal(mtime) {
			t.Errorf("%s: mtime %v, want %v", p, fi.ModTime(), mtime)
		}
	}
	if st := stat(t, upper+"/gone"); st.Rdev != 0 {
		t.Errorf("whiteout %s is device %d, want 0/0", upper+"/gone", st.Rdev)
	}
	links := map[string]string{lower + "/bin/sh": "tool", lower + "/usr/bin/abs": "/bin/tool", lower + "/up": "../../../../etc/marker"}
	for p, want := range links {
		if got, err := os.Readlink(p); err != nil || got != want {
			t.Errorf("%s -> %q, %v; want %q", p, got, err, want)
		}
	}
	if a, b := stat(t, lower+"/bin/tool"), stat(t, lower+"/bin/tool2"); a.Ino != b.Ino || a.Nlink != 2 {
		t.Errorf("bin/tool2 is not a hard link of bin/tool: inodes %d, %d, links %d", a.Ino, b.Ino, a.Nlink)
	}
	if st := stat(t, lower+"/home/user/file"); st.Uid != 1000 || st.Gid != 1000 {
		t.Errorf("home/user/file owned by %d:%d, want 1000:1000", st.Uid, st.Gid)
	}
	if st := stat(t, lower+"/etc/passwd"); st.Uid != 0 || st.Gid != 0 {
		t.Errorf("etc/passwd owned by %d:%d, want 0:0", st.Uid, st.Gid)
	}
	for _, p := range []string{lower + "/fifo", lower + "/null"} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: a device or fifo was made in the cache (%v)", p, err)
		}
	}
	buf := make([]byte, 4)
	if n, err := unix.Lgetxattr(upper+"/opq", safetar.OpaqueXattr, buf); err != nil || string(buf[:n]) != "y" {
		t.Errorf("%s/opq: %s = %q, %v; want y", upper, safetar.OpaqueXattr, buf[:n], err)
	}
	if _, err := unix.Lgetxattr(lower+"/opq", safetar.OpaqueXattr, buf); err == nil {
		t.Errorf("%s/opq is opaque too", lower)
	}
}

func stat(t *testing.T, p string) *syscall.Stat_t {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t)
}

// A second pull of a plain reference unpacks nothing: every layer is
// cached and its directory is the one the first pull made; another form of
// the same image reads no layer either.
func TestSecondPullIsCached(t *testing.T) {
	s, _ := newStore(t)
	img := imageOf(t, richConfig, tarOf(t, mkfile("a", "1", 0o644)), tarOf(t, mkfile("b", "2", 0o644)))
	ref := push(t, img, "cached/image:v1")
	first, err := s.Pull(context.Background(), ref, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := s.unpacked.Load(); n != 2 {
		t.Fatalf("the first pull unpacked %d layers, want 2", n)
	}
	before := stat(t, s.LayerPath(first.Layers[0]))
	for _, again := range []string{ref, "oci:" + writeLayout(t, img, "v1")} {
		var ev events
		second, err := s.Pull(context.Background(), again, ev.add)
		if err != nil {
			t.Fatal(err)
		}
		count, layers := ev.statuses()
		if second.ID != first.ID || s.unpacked.Load() != 2 || count["unpacking"]+count["downloading"] != 0 ||
			len(layers["cached"]) != 2 || count["resolving"] != 1 || count["done"] != 1 {
			t.Errorf("pull of %s again: id %s, %d unpacked in all, events %v", again, second.ID, s.unpacked.Load(), count)
		}
	}
	if after := stat(t, s.LayerPath(first.Layers[0])); after.Ino != before.Ino || after.Ctim != before.Ctim {
		t.Errorf("the layer directory was made again")
	}
	got, err := s.Get(ref)
	if err != nil || len(got.Refs) != 2 {
		t.Errorf("refs after pulls by two names: %v, %v", got.Refs, err)
	}
}

// Eight pulls of one new image at once unpack each layer exactly once.
func TestConcurrentPullsUnpackOnce(t *testing.T) {
	s, _ := newStore(t)
	var tars [][]byte
	for i := range 3 {
		tars = append(tars, tarOf(t, mkfile("f", fmt.Sprint(i)+strings.Repeat("y", 1<<16), 0o644)))
	}
	img := imageOf(t, richConfig, tars...)
	ref := push(t, img, "concurrent/image:v1")
	var ev events
	var wg sync.WaitGroup
	ids := make([]string, 8)
	errs := make([]error, 8)
	for i := range 8 {
		wg.Go(func() {
			got, err := s.Pull(context.Background(), ref, ev.add)
			ids[i], errs[i] = got.ID, err
		})
	}
	wg.Wait()
	want := wantOf(t, img).ID
	for i := range 8 {
		if errs[i] != nil || ids[i] != want {
			t.Errorf("pull %d: %s, %v; want %s", i, ids[i], errs[i], want)
		}
	}
	_, layers := ev.statuses()
	if n := s.unpacked.Load(); n != 3 || len(layers["unpacking"]) != 3 {
		t.Errorf("%d unpackings (of %d layers), want each of the 3 layers once", n, len(layers["unpacking"]))
	}
	if list, _ := s.List(); len(list) != 1 || !slices.Equal(list[0].Refs, []string{ref}) {
		t.Errorf("the cache lists %+v", list)
	}
}

// An unknown image, a layout that does not exist, an archive that is no
// tar, a malformed reference and a registry that does not answer: each a
// clear error of its class that names what was asked.
func TestPullErrors(t *testing.T) {
	s, _ := newStore(t)
	notTar := filepath.Join(t.TempDir(), "not.tar")
	if err := os.WriteFile(notTar, []byte("this is no tar archive\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		ref   string
		class error
		says  []string
	}{
		{testRegistry(t) + "/no/such:image", errdefs.ErrNotFound, []string{testRegistry(t) + "/no/such:image"}},
		{"oci:/no/such/layout", errdefs.ErrNotFound, []string{"/no/such/layout", "does not exist"}},
		{"docker-archive:" + notTar, errdefs.ErrInvalidArgument, []string{notTar, "not a docker save archive"}},
		{"oci:relative/dir", errdefs.ErrInvalidArgument, []string{"relative/dir", "absolute"}},
		{"Not A Reference", errdefs.ErrInvalidArgument, []string{"Not A Reference"}},
		{"127.0.0.1:1/nobody/home:v1", errdefs.ErrUnavailable, []string{"127.0.0.1:1/nobody/home:v1", "does not answer"}},
	} {
		_, err := s.Pull(context.Background(), c.ref, nil)
		if !errors.Is(err, c.class) {
			t.Errorf("pull %s: %v, want %v", c.ref, err, c.class)
			continue
		}
		for _, say := range c.says {
			if !strings.Contains(err.Error(), say) {
				t.Errorf("pull %s: %q does not say %q", c.ref, err, say)
			}
		}
	}
	if _, err := s.Get("no/such:image"); !errors.Is(err, errdefs.ErrNotFound) || !strings.Contains(err.Error(), "no/such:image") {
		t.Errorf("Get of an unknown image: %v", err)
	}
}

// A plain reference the local engine has comes from the engine, with the
// engine's id.
func TestPullFromEngine(t *testing.T) {
	testenv.RequireDocker(t)
	s, err := Open(filepath.Join(t.TempDir(), "cache"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	img, err := s.Pull(context.Background(), testenv.TestImage, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(img.ID, "sha256:") || len(img.Layers) == 0 || img.Size == 0 {
		t.Fatalf("pulled %+v", img)
	}
	if _, err := os.Stat(filepath.Join(s.LayerPath(img.Layers[0]), "bin")); err != nil {
		t.Errorf("the engine's image has no /bin: %v", err)
	}
	if entries, _ := os.ReadDir(s.tmpDir()); len(entries) != 0 {
		t.Errorf("the export was left in %s: %v", s.tmpDir(), entries)
	}
}

// A registry pull reports resolving, then for each layer downloading (up
// to its full size) before unpacking, then done.
func TestPullProgress(t *testing.T) {
	s, _ := newStore(t)
	img := imageOf(t, richConfig, tarOf(t, mkfile("big", strings.Repeat("z", 3<<20), 0o644)), tarOf(t, mkfile("small", "s", 0o644)))
	var ev events
	got, err := s.Pull(context.Background(), push(t, img, "progress/image:v1"), ev.add)
	if err != nil {
		t.Fatal(err)
	}
	all := ev.all
	if len(all) < 2 || all[0].Status != "resolving" || all[len(all)-1].Status != "done" {
		t.Fatalf("events %+v: want resolving first and done last", all)
	}
	for _, layer := range got.Layers {
		var downloaded int64
		var total int64 = -1
		unpacking := false
		for _, p := range all {
			switch {
			case p.Layer != layer:
			case p.Status == "downloading" && !unpacking:
				downloaded, total = p.Current, p.Total
			case p.Status == "unpacking":
				unpacking = true
			default:
				t.Errorf("layer %s: event %+v out of order", layer, p)
			}
		}
		if !unpacking || total <= 0 || downloaded != total {
			t.Errorf("layer %s: downloaded %d of %d, then unpacking %v", layer, downloaded, total, unpacking)
		}
	}
}

// A zstd layer unpacks as a gzip one does.
func TestPullZstdLayer(t *testing.T) {
	s, _ := newStore(t)
	tb := tarOf(t, mkfile("z", "zstd\n", 0o644))
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(tb)), nil },
		tarball.WithCompression(compression.ZStd))
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, l)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Pull(context.Background(), "oci:"+writeLayout(t, img, "z"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if data, err := s.ReadFile(got, "/z"); err != nil || string(data) != "zstd\n" {
		t.Errorf("/z: %q, %v", data, err)
	}
}
