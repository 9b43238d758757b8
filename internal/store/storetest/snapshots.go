package storetest

import (
	"errors"
	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"strings"
	"testing"
)

// A snapshot is listed in its state; names are unique per tenant; one
// that would take its tenant's snapshots past their quota does not become
// ready, in the same transaction; the usage counts ready ones only.
func testSnapshotsAndTheirQuota(t *testing.T, open Opener) {
	s := fresh(t, open)
	AddTenant(t, s, "acme", sandbox.Quota{SnapshotBytes: 10})
	take := func(name string, bytes int64) (*sandbox.Snapshot, error) {
		snap := &sandbox.Snapshot{ID: sandbox.NewID(), Tenant: "acme", Name: name, State: sandbox.SnapshotCreating, CreatedAt: T0}
		if err := s.CreateSnapshot(Ctx(t), snap); err != nil {
			return nil, err
		}
		snap.Manifest, snap.Files, snap.Bytes = "sha256:"+strings.Repeat("0", 64), 1, bytes
		return snap, s.FinishSnapshot(Ctx(t), snap)
	}
	if _, err := take("a", 6); err != nil {
		t.Fatal(err)
	}
	if _, err := take("a", 1); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("a second snapshot named a: %v", err)
	}
	over, err := take("b", 6)
	if !errors.Is(err, errdefs.ErrResourceExhausted) || !strings.Contains(err.Error(), "quota of 10 of snapshots") {
		t.Fatalf("a snapshot past the quota: %v", err)
	}
	if got, _ := s.GetSnapshot(Ctx(t), "acme", over.ID); got.State != sandbox.SnapshotCreating {
		t.Errorf("the refused snapshot is %s", got.State)
	}
	_, u, err := s.GetTenant(Ctx(t), "acme")
	if err != nil || u.SnapshotBytes != 6 {
		t.Errorf("usage %+v, %v; want the ready snapshot's 6 bytes", u, err)
	}
	if _, err := take("c", 4); err != nil {
		t.Errorf("a snapshot that fills the quota exactly: %v", err)
	}
}
