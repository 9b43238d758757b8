package migrate

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/store"
	"github.com/corral-sandbox/corral/internal/store/postgres"
	"github.com/corral-sandbox/corral/internal/store/sqlite"
	"github.com/corral-sandbox/corral/internal/store/storetest"
	"github.com/corral-sandbox/corral/internal/testenv"
)

// fill writes something of every kind into s.
func fill(t *testing.T, s store.Store) {
	t.Helper()
	ctx, t0 := storetest.Ctx(t), storetest.T0
	storetest.AddTenant(t, s, "team", sandbox.Quota{Sandboxes: 9, SnapshotBytes: 1 << 30})
	for i := range 3 {
		sb := storetest.InTenant(fmt.Sprintf("box-%d", i), "team")
		storetest.Create(t, s, sb)
		for k := range 4 {
			op := storetest.NewOp(sb.ID, sandbox.OpDriverStart, "gw-1", t0.Add(time.Duration(k)*time.Second))
			storetest.Put(t, s, op)
		}
		if _, err := s.Mutate(ctx, sb.ID, func(r *sandbox.Sandbox) (store.Mutation, error) {
			r.Desired, r.Phase, r.PauseMemory = sandbox.DesiredPaused, sandbox.PhasePaused, i == 1
			return store.Mutation{}, nil
		}); err != nil {
			t.Fatal(err)
		}
		if err := s.AddExposedPort(ctx, sandbox.ExposedPort{SandboxID: sb.ID, Port: 8000 + i, Address: fmt.Sprintf("127.0.0.1:%d", 9000+i), CreatedAt: t0}); err != nil {
			t.Fatal(err)
		}
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(s.CreateToken(ctx, &sandbox.Token{ID: "tok1", Name: "ci", Tenant: "team", Role: "member", Hash: []byte{1, 2, 3}, CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)}))
	must(s.CreateSecret(ctx, &sandbox.Secret{Name: "gh", Tenant: "team", Sealed: []byte{0, 255, 7}, Fingerprint: "fp", CreatedAt: t0, UpdatedAt: t0}))
	must(s.CreatePool(ctx, &sandbox.Pool{Name: "warm", Tenant: "team", Size: 2, Spec: sandbox.Spec{Image: "alpine"}, CreatedAt: t0}))
	must(s.CreateSnapshot(ctx, &sandbox.Snapshot{ID: sandbox.NewID(), Tenant: "team", Name: "base", State: sandbox.SnapshotCreating, CreatedAt: t0}))
	must(s.AddGatewayEvent(ctx, store.GatewayEvent{At: t0, Kind: "orphan_found", Subject: "x", Detail: "y"}))
	must(s.AppendLedger(ctx, []sandbox.CredentialUse{{Tenant: "team", Secret: "gh", Time: t0, Verdict: sandbox.UseInjected, Status: 200}},
		[]sandbox.EgressDecision{{SandboxID: "id1", Time: t0, Verdict: "denied", Reason: "no"}}))
}

// everything is what a store says it holds, through the interface.
type everything struct {
	Identity  string
	Sandboxes []*sandbox.Sandbox
	Journals  map[string][]*sandbox.Operation
	Ports     []sandbox.ExposedPort
	Tenants   []*sandbox.Tenant
	Tokens    []*sandbox.Token
	Secrets   []*sandbox.Secret
	Pools     []*sandbox.Pool
	Snapshots []*sandbox.Snapshot
	Events    []store.GatewayEvent
	Uses      []sandbox.CredentialUse
	Denials   []sandbox.EgressDecision
}

func read(t *testing.T, s store.Store) everything {
	t.Helper()
	ctx := storetest.Ctx(t)
	var e everything
	var err error
	errs := []error{}
	keep := func(err error) { errs = append(errs, err) }
	e.Identity, err = s.Identity(ctx)
	keep(err)
	e.Sandboxes, err = s.ListSandboxes(ctx, "")
	keep(err)
	e.Journals = map[string][]*sandbox.Operation{}
	for _, sb := range e.Sandboxes {
		e.Journals[sb.ID], err = s.ListOperations(ctx, sb.ID)
		keep(err)
	}
	e.Ports, err = s.ListExposedPorts(ctx, "")
	keep(err)
	e.Tenants, err = s.ListTenants(ctx)
	keep(err)
	e.Tokens, err = s.ListTokens(ctx, "")
	keep(err)
	e.Secrets, err = s.ListSecrets(ctx, "")
	keep(err)
	e.Pools, err = s.ListPools(ctx, "")
	keep(err)
	e.Snapshots, err = s.ListSnapshots(ctx, "")
	keep(err)
	e.Events, err = s.ListGatewayEvents(ctx)
	keep(err)
	e.Uses, err = s.CredentialUses(ctx, "team", "gh", 0, 100)
	keep(err)
	e.Denials, err = s.EgressDenials(ctx, "id1", 0, 100)
	keep(err)
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return e
}

// A SQLite store carried into PostgreSQL reads the same through the
// store, ids and the identity included; the journal's ids go on after
// the copied ones; a target that has records is refused.
func TestCopySQLiteIntoPostgres(t *testing.T) {
	url := testenv.PostgresDatabase(t, "into")
	path := filepath.Join(t.TempDir(), "corral.db")
	src, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	fill(t, src)
	want := read(t, src)
	src.Close()

	copied, err := Copy(context.Background(), path, url)
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	for _, c := range copied {
		counts[c.Table] = c.Rows
	}
	if counts["operations"] != 15 || counts["sandboxes"] != 3 || counts["tenants"] != 2 || counts["identity"] != 1 {
		t.Errorf("copied %v", counts)
	}
	dst, err := postgres.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	got := read(t, dst)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("PostgreSQL after the copy holds\n%+v\nwant\n%+v", got, want)
	}
	last := int64(0)
	for _, ops := range want.Journals {
		for _, op := range ops {
			last = max(last, op.ID)
		}
	}
	next := storetest.Put(t, dst, storetest.NewOp(want.Sandboxes[0].ID, sandbox.OpDriverStop, "gw-2", storetest.T0))
	if next.ID <= last {
		t.Errorf("a journal entry after the copy got id %d; want past the copied %d", next.ID, last)
	}
	dst.Close()

	if _, err := Copy(context.Background(), path, url); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("a copy into a store with records: %v; want FailedPrecondition", err)
	}
}
