package atomicfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func TestWriteReplacesWhole(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	writes := []func(string, []byte, os.FileMode) error{WriteDurable, WriteVolatile, Write}
	for i, content := range []string{"first", "second, longer", "third"} {
		if err := writes[i](path, []byte(content), 0o640); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != content {
			t.Fatalf("after writing %q: %q, %v", content, got, err)
		}
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o640 {
		t.Fatalf("mode: %v, %v", st, err)
	}
	if left := TempFiles(path); len(left) > 0 {
		t.Fatalf("temporary files left: %v", left)
	}
	if err := Write(filepath.Join(t.TempDir(), "no", "dir"), nil, 0o600); err == nil {
		t.Fatal("a write into a missing directory succeeded")
	}
}

func TestWritersAtOnceEachWriteWhole(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	contents := map[string]bool{}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		content := strings.Repeat(fmt.Sprint(i), 64<<10)
		contents[content] = true
		wg.Go(func() { errs <- Write(path, []byte(content), 0o600) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil || !contents[string(got)] {
		t.Fatalf("after 16 writers at once: %d bytes that none wrote whole, %v", len(got), err)
	}
	if left := TempFiles(path); len(left) > 0 {
		t.Fatalf("temporary files left: %v", left)
	}
}

func TestCreateLetsOneWriterWin(t *testing.T) {
	path := filepath.Join(t.TempDir(), "key")
	var wg sync.WaitGroup
	var mu sync.Mutex
	won := 0
	for i := range 16 {
		wg.Go(func() {
			err := Create(path, []byte(fmt.Sprint(i)), 0o600)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				won++
			case !errors.Is(err, fs.ErrExist):
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if won != 1 {
		t.Fatalf("%d writers created the file, want 1", won)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("mode: %v, %v", st, err)
	}
	if left := TempFiles(path); len(left) > 0 {
		t.Fatalf("temporary files left: %v", left)
	}
}
