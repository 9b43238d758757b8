package storetest

import (
	"errors"
	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/store"
	"testing"
	"time"
)

func member(pool, name string, phase sandbox.Phase, at time.Time) *sandbox.Sandbox {
	sb := NewSandbox(name, at)
	sb.Spec.Labels = map[string]string{sandbox.LabelPool: pool}
	sb.Phase = phase
	return sb
}

func claim(name, requestID string, at time.Time) store.Claim {
	return store.Claim{Name: name, RequestID: requestID, Labels: map[string]string{"k": "v"}, At: at,
		Op: &sandbox.Operation{Kind: sandbox.OpClaim, State: sandbox.OpSucceeded, Owner: "me",
			StartedAt: at, FinishedAt: at, Deadline: at, Detail: "claimed from pool warm"}}
}

func testPoolsSurviveReopen(t *testing.T, open Opener) {
	s := open(t, "kept")
	ctx := Ctx(t)
	p := &sandbox.Pool{Tenant: "default", Name: "warm", Size: 2, Spec: sandbox.Spec{Image: "busybox", Command: []string{"sleep", "1"}}, CreatedAt: T0}
	if err := s.CreatePool(ctx, p); err != nil {
		t.Fatal(err)
	}
	if err := s.CreatePool(ctx, p); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Fatalf("second CreatePool: %v, want already exists", err)
	}
	s.Close()
	s = open(t, "kept")
	got, err := s.GetPool(ctx, "default", "warm")
	if err != nil {
		t.Fatal(err)
	}
	if got.Size != 2 || got.Spec.Image != "busybox" || len(got.Spec.Command) != 2 || !got.CreatedAt.Equal(T0) {
		t.Errorf("reopened pool = %+v", got)
	}
	if list, err := s.ListPools(ctx, ""); err != nil || len(list) != 1 {
		t.Fatalf("ListPools = %v, %v", list, err)
	}
	if err := s.DeletePool(ctx, "default", "warm"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetPool(ctx, "default", "warm"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("GetPool after delete: %v, want not found", err)
	}
	if err := s.DeletePool(ctx, "default", "warm"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("second DeletePool: %v, want not found", err)
	}
}

func testClaimSandbox(t *testing.T, open Opener) {
	s := fresh(t, open)
	ctx := Ctx(t)
	if _, _, err := s.ClaimSandbox(ctx, "default", "warm", claim("x", "", T0)); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("claim from a missing pool: %v, want not found", err)
	}
	if err := s.CreatePool(ctx, &sandbox.Pool{Tenant: "default", Name: "warm", Size: 3, CreatedAt: T0}); err != nil {
		t.Fatal(err)
	}
	Create(t, s, member("warm", "warm-provisioning", sandbox.PhaseProvisioning, T0))
	Create(t, s, member("other", "other-ready", sandbox.PhaseReady, T0))
	if _, _, err := s.ClaimSandbox(ctx, "default", "warm", claim("x", "", T0)); !errors.Is(err, store.ErrNoneReady) {
		t.Fatalf("claim with none ready: %v, want ErrNoneReady", err)
	}
	ready := member("warm", "warm-ready", sandbox.PhaseReady, T0.Add(time.Second))
	Create(t, s, ready)
	Create(t, s, NewSandbox("taken", T0))
	if _, _, err := s.ClaimSandbox(ctx, "default", "warm", claim("taken", "", T0)); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Fatalf("claim to a taken name: %v, want already exists", err)
	}

	sb, claimed, err := s.ClaimSandbox(ctx, "default", "warm", claim("x", "req-1", T0.Add(time.Minute)))
	if err != nil || !claimed {
		t.Fatalf("claim: %v, %v", claimed, err)
	}
	if sb.ID != ready.ID || sb.Name != "x" || sb.PoolOf() != "" || sb.Spec.Labels["k"] != "v" || sb.Spec.Image != "alpine:3" {
		t.Errorf("claimed %+v, want member %s renamed x with the claim's labels", sb, ready.ID)
	}
	if _, err := s.GetSandboxByName(ctx, "", "warm-ready"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("old name still found: %v", err)
	}
	ops, err := s.ListOperations(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if last := ops[len(ops)-1]; last.Kind != sandbox.OpClaim || last.State != sandbox.OpSucceeded {
		t.Errorf("last journal entry %+v, want a settled claim", last)
	}
	again, claimed, err := s.ClaimSandbox(ctx, "default", "warm", claim("x", "req-1", T0))
	if err != nil || claimed || again.ID != sb.ID {
		t.Errorf("retried claim = %v, %v, %v; want the same sandbox, not claimed again", again, claimed, err)
	}
	if _, _, err := s.ClaimSandbox(ctx, "default", "warm", claim("y", "", T0)); !errors.Is(err, store.ErrNoneReady) {
		t.Errorf("claim after the only ready member went: %v, want ErrNoneReady", err)
	}
}
