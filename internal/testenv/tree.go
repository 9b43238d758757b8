package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
)

// DescribeTree lists a tree as a copy of it must keep it, sorted: each
// entry's name, type and mode, modification time (nanoseconds), contents
// or link target, and the first name of a file it shares with another (a
// hard link). Links are not followed.
func DescribeTree(t testing.TB, dir string) []string {
	t.Helper()
	var out []string
	inodes := map[uint64]string{}
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == "." {
			return nil
		}
		line := fmt.Sprintf("%s %v %d", rel, fi.Mode(), fi.ModTime().UnixNano())
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			line += " -> " + target
		case fi.Mode().IsRegular():
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			line += fmt.Sprintf(" %q", data)
			ino := fi.Sys().(*syscall.Stat_t).Ino
			if first, ok := inodes[ino]; ok {
				line += " linked to " + first
			}
			inodes[ino] = rel
		}
		out = append(out, line)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

// SameTree fails the test, naming the first entry that differs, when two
// descriptions (DescribeTree) are not the same.
func SameTree(t testing.TB, what string, want, got []string) {
	t.Helper()
	if strings.Join(want, "\n") == strings.Join(got, "\n") {
		return
	}
	for i := range min(len(want), len(got)) {
		if want[i] != got[i] {
			t.Fatalf("%s: entry %d differs:\nwant %s\ngot  %s", what, i, want[i], got[i])
		}
	}
	t.Fatalf("%s: %d entries, want %d", what, len(got), len(want))
}
