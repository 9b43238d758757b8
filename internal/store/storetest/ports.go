package storetest

import (
	"errors"
	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/store"
	"slices"
	"testing"
	"time"
)

func addresses(t *testing.T, s store.Store, sandboxID string) []string {
	t.Helper()
	list, err := s.ListExposedPorts(Ctx(t), sandboxID)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range list {
		out = append(out, p.Address)
	}
	return out
}

func testExposedPorts(t *testing.T, open Opener) {
	s := open(t, "kept")
	ctx := Ctx(t)
	a, b := NewSandbox("a", T0), NewSandbox("b", T0)
	Create(t, s, a)
	Create(t, s, b)
	add := func(id string, port int, addr string, at time.Duration) error {
		return s.AddExposedPort(ctx, sandbox.ExposedPort{SandboxID: id, Port: port, Address: addr, CreatedAt: T0.Add(at)})
	}
	if err := add(a.ID, 8080, "127.0.0.1:40001", 0); err != nil {
		t.Fatal(err)
	}
	if err := add(a.ID, 9090, "0.0.0.0:40002", time.Second); err != nil {
		t.Fatal(err)
	}
	if err := add(b.ID, 8080, "127.0.0.1:40003", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := add(a.ID, 8080, "127.0.0.1:40009", 3*time.Second); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Fatalf("the same port again: %v, want already exists", err)
	}
	if err := add(b.ID, 9090, "127.0.0.1:40001", 3*time.Second); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Fatalf("a taken address: %v, want already exists", err)
	}
	if err := add(sandbox.NewID(), 8080, "127.0.0.1:40010", 3*time.Second); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("a missing sandbox: %v, want not found", err)
	}
	if got := addresses(t, s, a.ID); !slices.Equal(got, []string{"127.0.0.1:40001", "0.0.0.0:40002"}) {
		t.Fatalf("a's ports: %v", got)
	}
	if got := addresses(t, s, ""); len(got) != 3 {
		t.Fatalf("every port: %v", got)
	}

	if err := s.RemoveExposedPort(ctx, a.ID, 9090); err != nil {
		t.Fatal(err)
	}
	if err := s.RemoveExposedPort(ctx, a.ID, 9090); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("removed twice: %v, want not found", err)
	}
	// a reopened store keeps them; a sandbox's delete removes its own
	s.Close()
	s = open(t, "kept")
	if got := addresses(t, s, ""); !slices.Equal(got, []string{"127.0.0.1:40001", "127.0.0.1:40003"}) {
		t.Fatalf("after reopening: %v", got)
	}
	if err := s.DeleteSandbox(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if got := addresses(t, s, ""); !slices.Equal(got, []string{"127.0.0.1:40003"}) {
		t.Fatalf("after a's delete: %v", got)
	}
}
