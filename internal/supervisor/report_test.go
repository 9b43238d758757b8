package supervisor_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/supervisor"
)

// A report directory a sandbox can write to: ReadReport reads only small
// regular files, never follows a symlink, never blocks.
func TestReadReportTrustsNothing(t *testing.T) {
	dir, outside := t.TempDir(), t.TempDir()
	secret := filepath.Join(outside, "secret")
	if err := os.WriteFile(secret, []byte("host secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(dir, "ok"), []byte("landlock ABI 7\n"), 0o644))
	must(os.Symlink(secret, filepath.Join(dir, "link")))
	must(os.Symlink(outside, filepath.Join(dir, "dirlink")))
	must(unix.Mkfifo(filepath.Join(dir, "fifo"), 0o644))
	must(os.Mkdir(filepath.Join(dir, "subdir"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "big"), bytes.Repeat([]byte("x"), supervisor.MaxReportSize+1), 0o644))
	must(os.WriteFile(filepath.Join(dir, "full"), bytes.Repeat([]byte("x"), supervisor.MaxReportSize), 0o644))

	if data, err := supervisor.ReadReport(dir, "ok"); err != nil || string(data) != "landlock ABI 7\n" {
		t.Errorf("regular file: %q, %v", data, err)
	}
	if data, err := supervisor.ReadReport(dir, "full"); err != nil || len(data) != supervisor.MaxReportSize {
		t.Errorf("a file of exactly the cap: %d bytes, %v", len(data), err)
	}
	if _, err := supervisor.ReadReport(dir, "missing"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v, want os.ErrNotExist", err)
	}
	for _, name := range []string{"link", "dirlink", "fifo", "subdir", "big", "../" + filepath.Base(outside) + "/secret", "..", ""} {
		done := make(chan struct{})
		var data []byte
		var err error
		go func() {
			defer close(done)
			data, err = supervisor.ReadReport(dir, name)
		}()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("ReadReport(%q) blocks", name)
		}
		if err == nil || bytes.Contains(data, []byte("secret")) {
			t.Errorf("ReadReport(%q) = %q, %v; want it refused", name, data, err)
		}
	}
}
