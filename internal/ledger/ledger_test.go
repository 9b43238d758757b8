package ledger_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/internal/ledger"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/store/sqlite"
)

// A follower sees what was kept before it came (from the store) and what
// comes after, each once; a use is in the store once it is seen; the
// following ends when its sandbox goes.
func TestFollowAndKeep(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "corral.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	l := ledger.New(st, nil)
	defer l.Close()
	l.Used(sandbox.CredentialUse{Tenant: "default", Secret: "s", Path: "/before", Verdict: sandbox.UseInjected})
	l.Denied(sandbox.EgressDecision{SandboxID: "id1", Path: "/before", Verdict: "denied"})
	var past []sandbox.CredentialUse
	for deadline := time.Now().Add(10 * time.Second); len(past) == 0 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		past, _, _, _ = l.Uses(ctx, "default", "s", false)
	}
	if len(past) != 1 || past[0].Path != "/before" || past[0].Seq == 0 {
		t.Fatalf("past uses %+v", past)
	}
	past, next, stop, err := l.Uses(ctx, "default", "s", true)
	if err != nil || len(past) != 1 {
		t.Fatalf("Uses(follow) = %+v, %v", past, err)
	}
	defer stop()
	_, denials, _, err := l.Denials(ctx, "id1", true)
	if err != nil {
		t.Fatal(err)
	}
	l.Used(sandbox.CredentialUse{Tenant: "default", Secret: "other", Path: "/other"})
	l.Used(sandbox.CredentialUse{Tenant: "default", Secret: "s", Path: "/after"})
	select {
	case u := <-next:
		if u.Path != "/after" || u.Seq <= past[0].Seq {
			t.Errorf("followed %+v; want /after, past the first", u)
		}
		if kept, _ := st.CredentialUses(ctx, "default", "s", past[0].Seq, 10); len(kept) != 1 {
			t.Errorf("a use followed is not in the store yet: %+v", kept)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the use that came after was not followed")
	}
	if last, err := l.LastUse(ctx, "default", "s"); err != nil || last == nil || last.Path != "/after" {
		t.Errorf("LastUse = %+v, %v; want /after", last, err)
	}
	if none, err := l.LastUse(ctx, "default", "never-used"); err != nil || none != nil {
		t.Errorf("LastUse of an unused secret = %+v, %v; want none", none, err)
	}
	l.SandboxGone("id1")
	select {
	case d, ok := <-denials:
		if ok {
			t.Errorf("after SandboxGone the follower got %+v; want its end", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the following of a deleted sandbox's denials did not end")
	}
}
