package storetest

import (
	"context"
	"fmt"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/store"
	"net/netip"
	"testing"
	"time"
)

// The ledgers keep what they are given, in order, survive a reopening, are
// bounded (the oldest go), and go with their secret or sandbox.
func testLedger(t *testing.T, open Opener) {
	ctx := context.Background()
	s := open(t, "kept")
	T0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	uses := make([]sandbox.CredentialUse, store.KeptUses+5)
	for i := range uses {
		uses[i] = sandbox.CredentialUse{Tenant: "default", Time: T0.Add(time.Duration(i) * time.Second), Secret: "gh-token", Credential: "github", SandboxID: "id1",
			Sandbox: "sb", Host: "api.test", Port: 443, Method: "GET", Path: fmt.Sprintf("/%d", i), Verdict: sandbox.UseInjected, Status: 200}
	}
	uses = append(uses, sandbox.CredentialUse{Tenant: "default", Time: T0, Secret: "other", Verdict: sandbox.UseRefused, Reason: "why"})
	denials := []sandbox.EgressDecision{{SandboxID: "id1", Sandbox: "sb", Time: T0, Host: "x.test", Port: 80, Addr: netip.MustParseAddr("10.0.0.1"),
		Verdict: "denied", Reason: "no network policy allows x.test port 80"}, {SandboxID: "id2", Time: T0, Verdict: "denied"}}
	if err := s.AppendLedger(ctx, uses, denials); err != nil {
		t.Fatal(err)
	}
	if uses[0].Seq == 0 || uses[1].Seq <= uses[0].Seq || denials[1].Seq <= denials[0].Seq {
		t.Errorf("seqs %d %d, %d %d; want rising", uses[0].Seq, uses[1].Seq, denials[0].Seq, denials[1].Seq)
	}
	s.Close()
	s = open(t, "kept")
	got, err := s.CredentialUses(ctx, "default", "gh-token", 0, store.KeptUses+100)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != store.KeptUses || got[0].Path != "/5" || got[len(got)-1] != uses[store.KeptUses+4] {
		t.Fatalf("%d uses kept, first %+v, last %+v; want the newest %d, the last as given", len(got), got[0], got[len(got)-1], store.KeptUses)
	}
	if last, _ := s.CredentialUses(ctx, "default", "gh-token", 0, 1); len(last) != 1 || last[0].Path != fmt.Sprintf("/%d", store.KeptUses+4) {
		t.Errorf("the newest use: %+v", last)
	}
	if after, _ := s.CredentialUses(ctx, "default", "gh-token", got[len(got)-2].Seq, 10); len(after) != 1 {
		t.Errorf("uses after the last but one: %d; want 1", len(after))
	}
	d, err := s.EgressDenials(ctx, "id1", 0, 10)
	if err != nil || len(d) != 1 || d[0] != denials[0] {
		t.Errorf("denials of id1: %+v, %v; want %+v", d, err, denials[0])
	}
	if err := s.DeleteSecret(ctx, "default", "gh-token"); err == nil {
		t.Error("deleting a secret that is not there succeeded")
	}
	s.CreateSecret(ctx, &sandbox.Secret{Tenant: "default", Name: "other", Sealed: []byte{1}, Fingerprint: "fp", CreatedAt: T0, UpdatedAt: T0})
	if err := s.DeleteSecret(ctx, "default", "other"); err != nil {
		t.Fatal(err)
	}
	if left, _ := s.CredentialUses(ctx, "default", "other", 0, 10); len(left) != 0 {
		t.Errorf("a deleted secret's uses are kept: %+v", left)
	}
}
