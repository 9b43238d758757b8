package sandboxfiles

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/policy"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

// A stopped sandbox's files are read and written from the host under the
// same lists Landlock enforces inside.
func TestAllowedFollowsTheFileLists(t *testing.T) {
	p, err := policy.Parse("version: 1\nfilesystem_policy:\n  include_workdir: false\n  read_only: [/sandbox/ro]\n  read_write: [/sandbox/rw]\n")
	if err != nil {
		t.Fatal(err)
	}
	write, read := allowed(p, false), allowed(p, true)
	for _, c := range []struct {
		path        string
		read, write bool
	}{
		{"/sandbox/rw", true, true}, {"/sandbox/rw/x", true, true}, {"/sandbox/ro/x", true, false},
		{"/sandbox/rwx", false, false}, {"/sandbox", false, false}, {"/sandbox/other", false, false},
	} {
		if read(c.path) != c.read || write(c.path) != c.write {
			t.Errorf("%s: read %v write %v, want %v %v", c.path, read(c.path), write(c.path), c.read, c.write)
		}
	}
	if allowed(policy.Default(), false) != nil {
		t.Errorf("the default policy (no file lists) restricts the host side")
	}
}

// records is one sandbox's record.
type records struct{ sb *sandbox.Sandbox }

func (r records) Get(context.Context, string) (*sandbox.Sandbox, error) { return r.sb, nil }
func (r records) Awake(_ context.Context, sb *sandbox.Sandbox) (*sandbox.Sandbox, error) {
	return sb, nil
}

// A path with ".." is refused before anything runs, for every front end:
// a path says where it is.
func TestDotDotIsRefused(t *testing.T) {
	f := New(records{&sandbox.Sandbox{Name: "box", Phase: sandbox.PhaseReady}}, nil)
	for _, p := range []string{"/sandbox/../etc/passwd", "/..", "/sandbox/a/../b"} {
		_, err := f.Stat(context.Background(), "box", p)
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), `".." is not taken`) {
			t.Errorf("Stat %s: %v; want it refused, saying why", p, err)
		}
	}
}
