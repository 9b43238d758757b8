package atomicfile

import (
	"os"
	"path/filepath"
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
	if _, err := os.Stat(path + ".tmp"); !os.IsNotExist(err) {
		t.Fatalf("temporary file left: %v", err)
	}
	if err := Write(filepath.Join(t.TempDir(), "no", "dir"), nil, 0o600); err == nil {
		t.Fatal("a write into a missing directory succeeded")
	}
}
