package files

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/safetar"
)

// sandboxFS is a stopped sandbox's /sandbox, as the gateway sees it on the
// host: a directory inside outer, so that a write outside it is seen.
func sandboxFS(t *testing.T) (*FS, string, string) {
	t.Helper()
	outer := t.TempDir()
	dir := filepath.Join(outer, "workdir")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	return &FS{Root: root, Prefix: "/sandbox"}, dir, outer
}

type entry struct {
	name, body, link string
	typ              byte
}

func tarOf(t *testing.T, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		hdr := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: 0o644, Linkname: e.link, Size: int64(len(e.body)), ModTime: time.Unix(1700000000, 0)}
		if e.typ != tar.TypeReg {
			hdr.Size = 0
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if e.typ == tar.TypeReg {
			tw.Write([]byte(e.body))
		}
	}
	tw.Close()
	return buf.Bytes()
}

// Each hostile stream is refused with its reason, and nothing lands
// outside the sandbox's directory.
func TestCopyInRefusesHostileTar(t *testing.T) {
	deep := strings.Repeat("d/", 10000) + "f"
	cases := []struct {
		name    string
		entries []entry
		want    string
	}{
		{"dotdot", []entry{{name: "../escaped", body: "x", typ: tar.TypeReg}}, `".." component`},
		{"absolute", []entry{{name: "/escaped", body: "x", typ: tar.TypeReg}}, "absolute name"},
		{"symlink out", []entry{{name: "l", link: "../", typ: tar.TypeSymlink}, {name: "l/escaped", body: "x", typ: tar.TypeReg}}, "leads outside"},
		{"absolute symlink", []entry{{name: "l", link: "/", typ: tar.TypeSymlink}, {name: "l/escaped", body: "x", typ: tar.TypeReg}}, "leads outside"},
		{"device", []entry{{name: "null", typ: tar.TypeChar}}, "device node"},
		{"deep", []entry{{name: deep, body: "x", typ: tar.TypeReg}}, "bytes long"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fsys, dir, outer := sandboxFS(t)
			err := fsys.Do(context.Background(), Request{Op: OpCopyIn, Path: "/sandbox"}, bytes.NewReader(tarOf(t, c.entries...)), &bytes.Buffer{})
			if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("copy-in: %v; want an invalid argument saying %q", err, c.want)
			}
			if _, err := os.Lstat(filepath.Join(outer, "escaped")); err == nil {
				t.Errorf("a file was written outside the sandbox's directory")
			}
			if _, err := os.Lstat("/escaped"); err == nil {
				t.Errorf("a file was written at /escaped")
			}
			if _, err := os.Lstat(filepath.Join(dir, "null")); err == nil {
				t.Errorf("a device node was made")
			}
		})
	}
}

// A tree packed and unpacked under a new name keeps its contents, modes,
// times and symlinks.
func TestCopyRoundTrip(t *testing.T) {
	fsys, dir, _ := sandboxFS(t)
	src := filepath.Join(dir, "src")
	os.MkdirAll(filepath.Join(src, "sub"), 0o750)
	os.WriteFile(filepath.Join(src, "sub", "x"), []byte("hello"), 0o600)
	os.Symlink("sub/x", filepath.Join(src, "link"))
	os.Link(filepath.Join(src, "sub", "x"), filepath.Join(src, "hard"))
	mtime := time.Unix(1600000000, 123000000)
	os.Chtimes(filepath.Join(src, "sub", "x"), mtime, mtime)
	var tarball bytes.Buffer
	if err := fsys.Do(context.Background(), Request{Op: OpCopyOut, Path: "/sandbox/src"}, nil, &tarball); err != nil {
		t.Fatal(err)
	}
	err := fsys.Do(context.Background(), Request{Op: OpCopyIn, Path: "/sandbox/dst", Base: "src"}, &tarball, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "dst", "sub", "x"))
	if string(data) != "hello" || err != nil {
		t.Fatalf("dst/sub/x: %q, %v", data, err)
	}
	fi, _ := os.Stat(filepath.Join(dir, "dst", "sub", "x"))
	if fi.Mode().Perm() != 0o600 || !fi.ModTime().Equal(mtime) {
		t.Errorf("dst/sub/x: mode %v mtime %v; want 0600 and %v", fi.Mode(), fi.ModTime(), mtime)
	}
	if l, err := os.Readlink(filepath.Join(dir, "dst", "link")); l != "sub/x" || err != nil {
		t.Errorf("dst/link: %q, %v; want the link sub/x", l, err)
	}
	a, _ := os.Stat(filepath.Join(dir, "dst", "sub", "x"))
	b, _ := os.Stat(filepath.Join(dir, "dst", "hard"))
	if !os.SameFile(a, b) {
		t.Errorf("dst/hard is not a hard link of dst/sub/x")
	}
	if fi, _ := os.Stat(filepath.Join(dir, "dst", "sub")); fi.Mode().Perm() != 0o750 {
		t.Errorf("dst/sub: mode %v, want 0750", fi.Mode())
	}
}

// Errors name the path and have the class a caller branches on.
func TestErrors(t *testing.T) {
	fsys, dir, _ := sandboxFS(t)
	os.WriteFile(filepath.Join(dir, "file"), []byte("x"), 0o644)
	ctx := context.Background()
	cases := []struct {
		req   Request
		class error
		want  string
	}{
		{Request{Op: OpRead, Path: "/sandbox/missing"}, errdefs.ErrNotFound, "/sandbox/missing: no such file"},
		{Request{Op: OpList, Path: "/sandbox/file"}, errdefs.ErrFailedPrecondition, "/sandbox/file: not a directory"},
		{Request{Op: OpCopyIn, Path: "/sandbox/nodir/x", Base: "x"}, errdefs.ErrNotFound, "/sandbox/nodir: no such directory"},
		{Request{Op: OpStat, Path: "/etc/passwd"}, errdefs.ErrFailedPrecondition, "only /sandbox"},
		{Request{Op: OpStat, Path: "/sandbox/../etc"}, errdefs.ErrFailedPrecondition, "only /sandbox"},
		{Request{Op: OpRemove, Path: "/sandbox/missing"}, errdefs.ErrNotFound, "/sandbox/missing"},
	}
	for _, c := range cases {
		err := fsys.Do(ctx, c.req, strings.NewReader(""), &bytes.Buffer{})
		if !errors.Is(err, c.class) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %s: %v; want %v saying %q", c.req.Op, c.req.Path, err, c.class, c.want)
		}
		// and the same error once it has crossed from a sandbox
		if got := ParseErr("noise\n" + ErrLine(err)); !errors.Is(got, c.class) || got.Error() != err.Error() {
			t.Errorf("%v crossed as %v", err, got)
		}
	}
	// docker cp's rules: a directory never replaces a file, nor a file a directory
	os.MkdirAll(filepath.Join(dir, "src", "sub"), 0o755)
	var tarball bytes.Buffer
	if err := fsys.Do(ctx, Request{Op: OpCopyOut, Path: "/sandbox/src"}, nil, &tarball); err != nil {
		t.Fatal(err)
	}
	err := fsys.Do(ctx, Request{Op: OpCopyIn, Path: "/sandbox/file", Base: "src"}, bytes.NewReader(tarball.Bytes()), &bytes.Buffer{})
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "does not replace a file with a directory") {
		t.Errorf("a directory onto a file: %v", err)
	}
	os.MkdirAll(filepath.Join(dir, "dst", "file"), 0o755)
	var one bytes.Buffer
	fsys.Do(ctx, Request{Op: OpCopyOut, Path: "/sandbox/file"}, nil, &one)
	err = fsys.Do(ctx, Request{Op: OpCopyIn, Path: "/sandbox/dst"}, &one, &bytes.Buffer{})
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "does not replace a directory with a file") {
		t.Errorf("a file onto a directory: %v", err)
	}
	// a fifo asked for by name says so; the copy does not end empty and ok
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	err = fsys.Do(ctx, Request{Op: OpCopyOut, Path: "/sandbox/fifo"}, nil, &bytes.Buffer{})
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "fifo") {
		t.Errorf("copy out of a fifo: %v; want it refused, saying what it is", err)
	}
	os.Symlink("/", filepath.Join(dir, "out"))
	err = fsys.Do(ctx, Request{Op: OpWrite, Path: "/sandbox/out/escaped"}, strings.NewReader("x"), &bytes.Buffer{})
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "leads outside") {
		t.Errorf("a write through a symlink out: %v", err)
	}
}

// A write replaces the file whole, and a policy's read-only path refuses it.
func TestWriteAtomicAndReadOnly(t *testing.T) {
	fsys, dir, _ := sandboxFS(t)
	ctx := context.Background()
	var out bytes.Buffer
	if err := fsys.Do(ctx, Request{Op: OpWrite, Path: "/sandbox/f", Mode: 0o640}, strings.NewReader("new"), &out); err != nil {
		t.Fatal(err)
	}
	res, err := ReadResult(&out)
	if err != nil || res.Info == nil || res.Info.Size != 3 || res.Info.Mode != 0o640 {
		t.Fatalf("write result: %+v, %v", res, err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("the workdir holds %v; want only f (no temporary file left)", entries)
	}
	fsys.Writable = func(p string) bool { return !strings.HasPrefix(p, "/sandbox/ro") }
	os.Mkdir(filepath.Join(dir, "ro"), 0o755)
	for _, req := range []Request{{Op: OpWrite, Path: "/sandbox/ro/f"}, {Op: OpMkdir, Path: "/sandbox/ro/d"}, {Op: OpRemove, Path: "/sandbox/ro"}, {Op: OpCopyIn, Path: "/sandbox/ro"}} {
		err := fsys.Do(ctx, req, strings.NewReader(""), &bytes.Buffer{})
		if !errors.Is(err, errdefs.ErrPermissionDenied) || !strings.Contains(err.Error(), "read-only") {
			t.Errorf("%s %s: %v; want permission denied (read-only)", req.Op, req.Path, err)
		}
	}
}

// On the host, every directory a copy or mkdir makes belongs to the
// sandbox's user, the parents a tar stream does not list too.
func TestHostSideOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chown needs root")
	}
	fsys, dir, _ := sandboxFS(t)
	fsys.Owner = &safetar.Owner{UID: 4321, GID: 4321}
	ctx := context.Background()
	err := fsys.Do(ctx, Request{Op: OpCopyIn, Path: "/sandbox"}, bytes.NewReader(tarOf(t, entry{name: "a/b/f", body: "x", typ: tar.TypeReg})), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if err := fsys.Do(ctx, Request{Op: OpMkdir, Path: "/sandbox/m/n", Parents: true}, nil, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"a", "a/b", "a/b/f", "m", "m/n"} {
		fi, err := os.Lstat(filepath.Join(dir, p))
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != 4321 || st.Gid != 4321 {
			t.Errorf("%s belongs to %d:%d, want 4321:4321", p, st.Uid, st.Gid)
		}
	}
}

// A copy cut short in the middle of a file (the caller went away, the disk
// is full) leaves no part of that file, and keeps the files it finished.
func TestCopyInCutShortLeavesNoPartialFile(t *testing.T) {
	fsys, dir, _ := sandboxFS(t)
	whole := tarOf(t, entry{name: "done", body: "complete", typ: tar.TypeReg}, entry{name: "big", body: strings.Repeat("x", 1<<20), typ: tar.TypeReg})
	cut := whole[:len(whole)-(1<<19)] // half of big's body
	err := fsys.Do(context.Background(), Request{Op: OpCopyIn, Path: "/sandbox"}, bytes.NewReader(cut), &bytes.Buffer{})
	if err == nil {
		t.Fatal("a stream cut in the middle of a file was copied in without an error")
	}
	if _, err := os.Lstat(filepath.Join(dir, "big")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the file cut short is there: %v", err)
	}
	if data, err := os.ReadFile(filepath.Join(dir, "done")); string(data) != "complete" || err != nil {
		t.Errorf("the file copied whole before it: %q, %v", data, err)
	}
}

// mkdir -p inside a sandbox makes every missing level: its root is the
// nearest directory that is there, not the path's parent, which is not.
func TestLocalMkdirParents(t *testing.T) {
	dir := t.TempDir()
	req := Request{Op: OpMkdir, Path: filepath.Join(dir, "a", "b", "c"), Parents: true}
	fsys, err := Local(req)
	if err != nil {
		t.Fatal(err)
	}
	defer fsys.Root.Close()
	if err := fsys.Do(context.Background(), req, nil, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(req.Path); err != nil || !fi.IsDir() {
		t.Fatalf("%s after mkdir -p: %v, %v", req.Path, fi, err)
	}
	if _, err := Local(Request{Op: OpMkdir, Path: filepath.Join(dir, "x", "y")}); err == nil {
		t.Error("Local of mkdir without parents under a missing directory: found a root, want not found")
	}
}
