package snapshots

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/safetar"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/testenv"
)

// makeTree fills dir with n files in nested directories, with varied modes
// and times, a symlink, a symlink out, a hard link and an empty directory.
func makeTree(t *testing.T, dir string, n int) {
	t.Helper()
	base := time.Date(2025, 3, 4, 5, 6, 7, 123456789, time.UTC)
	for i := range n {
		sub := filepath.Join(dir, fmt.Sprintf("d%02d", i%17))
		if err := os.MkdirAll(sub, 0o755); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(sub, fmt.Sprintf("f%04d", i))
		data := bytes.Repeat([]byte{byte(i)}, i%300)
		if i%10 == 0 {
			data = []byte("same contents in many files\n")
		}
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, os.FileMode(0o400|(i%8)<<3|i%5)); err != nil {
			t.Fatal(err)
		}
		mt := base.Add(time.Duration(i) * time.Second)
		if err := os.Chtimes(p, mt, mt); err != nil {
			t.Fatal(err)
		}
	}
	for _, err := range []error{
		os.Symlink("d00/f0000", filepath.Join(dir, "rel-link")),
		os.Symlink("/etc/passwd", filepath.Join(dir, "abs-link")),
		os.Link(filepath.Join(dir, "d01/f0001"), filepath.Join(dir, "hard-link")),
		os.Mkdir(filepath.Join(dir, "empty"), 0o711),
		os.Chmod(filepath.Join(dir, "d02"), 0o750),
		os.Chtimes(filepath.Join(dir, "d03"), base, base),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
}

func capture(t *testing.T, c *Content, dir string) (string, Stats) {
	t.Helper()
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	release := c.Hold()
	defer release()
	m, st, err := c.Capture(context.Background(), root)
	if err != nil {
		t.Fatal(err)
	}
	return m, st
}

func restore(t *testing.T, c *Content, manifest string) string {
	t.Helper()
	var buf bytes.Buffer
	if err := c.WriteTar(context.Background(), manifest, &buf); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if _, err := safetar.UnpackDir(&buf, dir, safetar.Options{What: "the sandbox"}); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestCaptureRestoresTheTreeAsItWas(t *testing.T) {
	c, err := OpenContent(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	src := t.TempDir()
	makeTree(t, src, 1000)
	want := testenv.DescribeTree(t, src)
	manifest, st := capture(t, c, src)
	if st.Files != int64(len(want)) {
		t.Errorf("stats say %d entries, the tree has %d", st.Files, len(want))
	}
	testenv.SameTree(t, "restored", want, testenv.DescribeTree(t, restore(t, c, manifest)))

	// identical files are kept once: 100 files share one contents
	blobs := 0
	filepath.WalkDir(filepath.Join(c.dir, "sha256"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			blobs++
		}
		return err
	})
	if blobs > 1000-99+1 {
		t.Errorf("%d blobs for 1,000 files of which 100 are alike (and a manifest)", blobs)
	}
	// a second capture of the same tree adds only nothing new
	again, _ := capture(t, c, src)
	if again != manifest {
		t.Errorf("the same tree captured twice has two manifests: %s, %s", manifest, again)
	}
}

func TestExportAndImportKeepTheTree(t *testing.T) {
	c, err := OpenContent(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	src := t.TempDir()
	makeTree(t, src, 50)
	manifest, st := capture(t, c, src)
	var archive bytes.Buffer
	meta := Meta{Name: "base", Spec: sandbox.Spec{Image: "debian:12", Command: []string{"sleep", "1d"}}, Files: st.Files, Bytes: st.Bytes}
	if err := c.Export(context.Background(), &archive, meta, manifest); err != nil {
		t.Fatal(err)
	}
	other, err := OpenContent(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	release := other.Hold()
	got, imported, _, err := other.Import(context.Background(), &archive)
	release()
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != "base" || got.Spec.Image != "debian:12" || len(got.Spec.Command) != 2 {
		t.Errorf("imported metadata %+v", got)
	}
	if imported != manifest {
		t.Errorf("the imported manifest is %s, the exported one %s", imported, manifest)
	}
	testenv.SameTree(t, "restored", testenv.DescribeTree(t, src), testenv.DescribeTree(t, restore(t, other, imported)))
}

// hostile builds an archive: valid metadata, then the given entries.
func hostile(t *testing.T, entries ...*tar.Header) io.Reader {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	meta := []byte(`{"version":1,"name":"x","spec":{}}`)
	tw.WriteHeader(&tar.Header{Name: metaName, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(meta))})
	tw.Write(meta)
	tw.WriteHeader(&tar.Header{Name: "sandbox/", Typeflag: tar.TypeDir, Mode: 0o755})
	for _, h := range entries {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			tw.Write(bytes.Repeat([]byte("x"), int(h.Size)))
		}
	}
	tw.Close()
	return &buf
}

func TestImportRefusesHostileArchives(t *testing.T) {
	outside := t.TempDir()
	for _, tc := range []struct {
		name    string
		entries []*tar.Header
		reason  string
	}{
		{"dot-dot", []*tar.Header{{Name: "sandbox/../../../escape", Typeflag: tar.TypeReg, Size: 1, Mode: 0o644}}, `".." component`},
		{"absolute", []*tar.Header{{Name: "/" + outside + "/escape", Typeflag: tar.TypeReg, Size: 1, Mode: 0o644}}, "absolute name"},
		{"through a link out", []*tar.Header{
			{Name: "sandbox/out", Typeflag: tar.TypeSymlink, Linkname: outside},
			{Name: "sandbox/out/escape", Typeflag: tar.TypeReg, Size: 1, Mode: 0o644}}, "leads outside"},
		{"hard link out", []*tar.Header{{Name: "sandbox/passwd", Typeflag: tar.TypeLink, Linkname: "/etc/passwd"}}, "absolute name"},
		{"device", []*tar.Header{{Name: "sandbox/mem", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 1, Mode: 0o666}}, "device node"},
		{"stray top entry", []*tar.Header{{Name: "other", Typeflag: tar.TypeReg, Size: 1, Mode: 0o644}}, `holds "other"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := OpenContent(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			release := c.Hold()
			_, _, _, err = c.Import(context.Background(), hostile(t, tc.entries...))
			release()
			if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.reason) {
				t.Fatalf("import: %v, want InvalidArgument with %q", err, tc.reason)
			}
			if _, err := os.Lstat(filepath.Join(outside, "escape")); err == nil {
				t.Fatal("the archive wrote outside the store")
			}
			left, _ := os.ReadDir(c.tmp())
			if len(left) != 0 {
				t.Errorf("the refused import left %d entries in the store's tmp", len(left))
			}
		})
	}
}

func TestCollectKeepsWhatManifestsList(t *testing.T) {
	c, err := OpenContent(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	a, b := t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(a, "shared"), []byte("both"), 0o644)
	os.WriteFile(filepath.Join(b, "shared"), []byte("both"), 0o644)
	os.WriteFile(filepath.Join(a, "only-a"), []byte("a"), 0o644)
	ma, _ := capture(t, c, a)
	mb, _ := capture(t, c, b)
	// a collection waits for a hold, never the reverse
	release := c.Hold()
	short, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	if _, err := c.Collect(short, func() ([]string, []string, error) { return nil, nil, nil }); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a collection while the store is held: %v", err)
	}
	cancel()
	release()
	removed, err := c.Collect(context.Background(), func() ([]string, []string, error) { return []string{mb}, nil, nil })
	if err != nil {
		t.Fatal(err)
	}
	if removed != 2 { // a's manifest and only-a
		t.Errorf("removed %d blobs, want 2", removed)
	}
	restore(t, c, mb) // whole
	var buf bytes.Buffer
	if err := c.WriteTar(context.Background(), ma, &buf); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("restore of a collected manifest: %v", err)
	}
}

func TestDamagedBlobIsAnError(t *testing.T) {
	c, err := OpenContent(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	src := t.TempDir()
	os.WriteFile(filepath.Join(src, "f"), []byte("contents"), 0o644)
	m, _ := capture(t, c, src)
	var blob string
	c.walk(m, func(e entry) error { blob = e.Digest; return nil })
	if err := os.WriteFile(c.path(blob), []byte("CONTENTS"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := c.WriteTar(context.Background(), m, io.Discard); err == nil || !strings.Contains(err.Error(), "damaged") {
		t.Fatalf("restore of a damaged blob: %v", err)
	}
}

// A sandbox's /sandbox is hostile: a link out of it is kept as a link and
// never followed, a fifo (which would block a reader) is left out.
func TestCaptureFollowsNoLinkAndOpensNoFifo(t *testing.T) {
	c, err := OpenContent(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	src, secret := t.TempDir(), filepath.Join(t.TempDir(), "secret")
	os.WriteFile(secret, []byte("host secret"), 0o600)
	for _, err := range []error{
		os.Symlink(secret, filepath.Join(src, "out")),
		os.Symlink(filepath.Dir(secret), filepath.Join(src, "dir-out")),
		syscall.Mkfifo(filepath.Join(src, "fifo"), 0o644),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	manifest, _ := capture(t, c, src)
	got := testenv.DescribeTree(t, restore(t, c, manifest))
	want := []string{
		fmt.Sprintf("dir-out %v %d -> %s", os.ModeSymlink|0o777, mtimeOf(t, filepath.Join(src, "dir-out")), filepath.Dir(secret)),
		fmt.Sprintf("out %v %d -> %s", os.ModeSymlink|0o777, mtimeOf(t, filepath.Join(src, "out")), secret),
	}
	testenv.SameTree(t, "restored", want, got)
	var buf bytes.Buffer
	if err := c.WriteTar(context.Background(), manifest, &buf); err != nil || bytes.Contains(buf.Bytes(), []byte("host secret")) {
		t.Fatalf("the snapshot holds what a link points to: %v", err)
	}
}

func mtimeOf(t *testing.T, p string) int64 {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.ModTime().UnixNano()
}
