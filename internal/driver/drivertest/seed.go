package drivertest

import (
	"archive/tar"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

// seedTar is a small tree as a snapshot gives it: a directory, a file with
// its own mode and time, a symlink.
func seedTar(t *testing.T, contents string, mtime time.Time) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range []*tar.Header{
		{Name: "seeded/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: mtime},
		{Name: "seeded/a", Typeflag: tar.TypeReg, Mode: 0o640, ModTime: mtime, Size: int64(len(contents))},
		{Name: "seeded/link", Typeflag: tar.TypeSymlink, Linkname: "a", ModTime: mtime},
	} {
		h.Format = tar.FormatPAX
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write([]byte(contents))
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return &buf
}

// testSeed: a created incarnation's /sandbox takes a snapshot's files
// (seeded twice, the second replacing the first); once started, the
// sandbox reads them and its user may write them; an incarnation that
// does not exist is not found.
func (s *suite) testSeed(t *testing.T) {
	d := s.driver(t)
	sd := capability[driver.Seeder](t, d, "cannot seed /sandbox")
	spec := d.spec(1)
	d.create(spec)
	ref := driver.Ref{ID: spec.ID, Generation: 1}
	mtime := time.Date(2024, 1, 2, 3, 4, 5, 600000000, time.UTC)
	if err := sd.Seed(ctx(t), ref, seedTar(t, "first\n", mtime)); err != nil {
		t.Fatalf("seed: %v", err)
	}
	if err := sd.Seed(ctx(t), ref, seedTar(t, "seeded contents\n", mtime)); err != nil {
		t.Fatalf("seed again: %v", err)
	}
	if wd, ok := d.Driver.(driver.Workdirs); ok {
		if dir, err := wd.Workdir(ctx(t), spec.ID); err == nil {
			fi, err := os.Stat(filepath.Join(dir, "seeded/a"))
			if err != nil || fi.Mode().Perm() != 0o640 || !fi.ModTime().Equal(mtime) {
				t.Errorf("the seeded file on the host: %v, %v; want mode 0640, modified at %v", fi, err, mtime)
			}
		}
	}
	if ex, ok := d.Driver.(driver.Execer); ok {
		d.start(spec.ID, 1)
		var out, errOut bytes.Buffer
		code, err := ex.Exec(ctx(t), spec.ID, driver.ExecOptions{Command: []string{"cat", "/sandbox/seeded/link"}, Stdout: &out, Stderr: &errOut})
		if err != nil || code != 0 || out.String() != "seeded contents\n" {
			t.Errorf("cat /sandbox/seeded/link in the sandbox: %d, %q, %q, %v; want the seeded file", code, out.String(), errOut.String(), err)
		}
		out.Reset()
		errOut.Reset()
		code, err = ex.Exec(ctx(t), spec.ID, driver.ExecOptions{Command: []string{"sh", "-c", "echo more >> /sandbox/seeded/a && touch /sandbox/seeded/new && cat /sandbox/seeded/a"},
			Stdout: &out, Stderr: &errOut})
		switch {
		case err == nil && code == 127 && d.Name() == "fake": // the fake has no shell
		case err != nil || code != 0 || out.String() != "seeded contents\nmore\n":
			t.Errorf("the sandbox's user writes the seeded files: %d, %q, %q, %v", code, out.String(), errOut.String(), err)
		}
	}
	if err := sd.Seed(ctx(t), driver.Ref{ID: sandbox.NewID(), Generation: 1}, seedTar(t, "x", mtime)); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("seed of a sandbox that does not exist: %v; want not found", err)
	}
}

// testOpenWorkdir: a created sandbox's /sandbox opens from the host, what
// is written there is in the sandbox once it starts, and it opens again
// while the sandbox runs; a missing sandbox is not found.
func (s *suite) testOpenWorkdir(t *testing.T) {
	d := s.driver(t)
	o := capability[driver.WorkdirOpener](t, d, "cannot open /sandbox from the host")
	spec := d.spec(1)
	d.create(spec)
	root, release, err := o.OpenWorkdir(ctx(t), spec.ID)
	if err != nil {
		t.Fatalf("open the workdir of a created sandbox: %v", err)
	}
	if err := root.WriteFile("from-the-host", []byte("opened\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	root.Close()
	release()
	d.start(spec.ID, 1)
	if ex, ok := d.Driver.(driver.Execer); ok {
		var out bytes.Buffer
		if code, err := ex.Exec(ctx(t), spec.ID, driver.ExecOptions{Command: []string{"cat", "/sandbox/from-the-host"}, Stdout: &out, Stderr: &bytes.Buffer{}}); err != nil || code != 0 || out.String() != "opened\n" {
			t.Errorf("cat in the sandbox: %d, %q, %v", code, out.String(), err)
		}
	}
	root, release, err = o.OpenWorkdir(ctx(t), spec.ID)
	if err != nil {
		t.Fatalf("open the workdir of a running sandbox: %v", err)
	}
	if _, err := root.Stat("from-the-host"); err != nil {
		t.Errorf("the running sandbox's workdir: %v", err)
	}
	root.Close()
	release()
	if _, _, err := o.OpenWorkdir(ctx(t), sandbox.NewID()); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("open the workdir of a sandbox that does not exist: %v; want not found", err)
	}
}
