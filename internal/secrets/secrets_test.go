package secrets_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/secrets"
	"github.com/corral-sandbox/corral/internal/store/sqlite"
)

// Value gives the current value: an update is seen by the next call, a
// delete ends it. A delete is refused while a running sandbox binds the
// secret, unless forced; Get names who binds it.
func TestValueFollowsChangesAndDeleteRespectsBindings(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "corral.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	keys, err := secrets.Load(filepath.Join(dir, "secrets.key"))
	if err != nil {
		t.Fatal(err)
	}
	s := secrets.New(st, keys)
	running := true
	s.Binders = func(_ context.Context, _, name string) ([]secrets.Binder, error) {
		return []secrets.Binder{{Name: "agent", Running: running}, {Name: "idle"}}, nil
	}
	if _, err := s.Create(ctx, "tok", []byte("one")); err != nil {
		t.Fatal(err)
	}
	if v, err := s.Value(ctx, "default", "tok"); err != nil || string(v) != "one" {
		t.Fatalf("Value = %q, %v", v, err)
	}
	if _, err := s.Update(ctx, "tok", []byte("two")); err != nil {
		t.Fatal(err)
	}
	if v, _ := s.Value(ctx, "default", "tok"); string(v) != "two" {
		t.Errorf("Value after the update = %q; want the new value", v)
	}
	if info, _ := s.Get(ctx, "tok"); strings.Join(info.BoundBy, ",") != "agent,idle" {
		t.Errorf("bound by %v", info.BoundBy)
	}
	if _, err := s.Delete(ctx, "tok", false); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "running sandboxes (agent)") {
		t.Errorf("delete while agent runs: %v", err)
	}
	if v, _ := s.Value(ctx, "default", "tok"); string(v) != "two" {
		t.Errorf("a refused delete changed the value: %q", v)
	}
	if _, err := s.Delete(ctx, "tok", true); err != nil {
		t.Fatal(err)
	}
	if v, err := s.Value(ctx, "default", "tok"); !errors.Is(err, errdefs.ErrNotFound) || strings.Contains(err.Error(), "two") {
		t.Errorf("Value after delete --force = %q, %v; want not found", v, err)
	}
	running = false
	s.Create(ctx, "tok", []byte("three"))
	if _, err := s.Delete(ctx, "tok", false); err != nil {
		t.Errorf("delete with no running binder: %v", err)
	}
}
