package storetest

import (
	"errors"
	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/store"
	"slices"
	"strings"
	"testing"
	"time"
)

// T0 is the base of every timestamp the tests write; nanoseconds are kept to
// prove they survive the round trip.
var T0 = time.Date(2030, 1, 2, 3, 4, 5, 6, time.UTC)

func NewSandbox(name string, at time.Time) *sandbox.Sandbox {
	return &sandbox.Sandbox{
		ID:     sandbox.NewID(),
		Name:   name,
		Tenant: "default",
		Spec: sandbox.Spec{
			Image:   "alpine:3",
			Command: []string{"sleep", "infinity"},
			Labels:  map[string]string{"team": "infra"},
			Policy:  "default",
		},
		Desired:    sandbox.DesiredRunning,
		Phase:      sandbox.PhaseProvisioning,
		Generation: 1,
		CreatedAt:  at,
		UpdatedAt:  at,
		Deadline:   at.Add(time.Minute),
	}
}

func NewOp(sandboxID string, kind sandbox.OpKind, owner string, at time.Time) *sandbox.Operation {
	return &sandbox.Operation{
		SandboxID:  sandboxID,
		Kind:       kind,
		State:      sandbox.OpPending,
		Owner:      owner,
		Attempt:    1,
		Generation: 1,
		StartedAt:  at,
		Deadline:   at.Add(time.Minute),
	}
}

// create stores sb with a pending create request and returns the request.
func Create(t *testing.T, s store.Store, sb *sandbox.Sandbox) *sandbox.Operation {
	t.Helper()
	req := NewOp(sb.ID, sandbox.OpCreate, "me", sb.CreatedAt)
	got, created, err := s.CreateSandbox(Ctx(t), sb, req)
	if err != nil {
		t.Fatalf("CreateSandbox(%s): %v", sb.Name, err)
	}
	if !created || got.ID != sb.ID {
		t.Fatalf("CreateSandbox(%s) = %s, created=%v; want a new record %s", sb.Name, got.ID, created, sb.ID)
	}
	return req
}

func Put(t *testing.T, s store.Store, op *sandbox.Operation) *sandbox.Operation {
	t.Helper()
	if err := s.PutOperation(Ctx(t), op); err != nil {
		t.Fatalf("PutOperation(%s): %v", op.Kind, err)
	}
	if op.ID == 0 {
		t.Fatalf("PutOperation(%s) left ID 0", op.Kind)
	}
	return op
}

func Ops(t *testing.T, s store.Store, id string) []*sandbox.Operation {
	t.Helper()
	list, err := s.ListOperations(Ctx(t), id)
	if err != nil {
		t.Fatal(err)
	}
	return list
}

func OpByID(t *testing.T, s store.Store, sandboxID string, id int64) *sandbox.Operation {
	t.Helper()
	for _, o := range Ops(t, s, sandboxID) {
		if o.ID == id {
			return o
		}
	}
	t.Fatalf("operation %d of sandbox %s not found", id, sandboxID)
	return nil
}

func Get(t *testing.T, s store.Store, id string) *sandbox.Sandbox {
	t.Helper()
	sb, err := s.GetSandbox(Ctx(t), id)
	if err != nil {
		t.Fatalf("GetSandbox(%s): %v", id, err)
	}
	return sb
}

func testCreateSandboxNameTaken(t *testing.T, open Opener) {
	s := fresh(t, open)
	first := NewSandbox("web", T0)
	Create(t, s, first)

	second := NewSandbox("web", T0.Add(time.Second))
	second.RequestID = "other-request"
	got, created, err := s.CreateSandbox(Ctx(t), second, NewOp(second.ID, sandbox.OpCreate, "me", T0))
	if !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Fatalf("second create of the name = %v, %v, %v; want ErrAlreadyExists", got, created, err)
	}
	if !strings.Contains(err.Error(), `"web"`) {
		t.Errorf("error %q does not name the sandbox", err)
	}
	list, err := s.ListSandboxes(Ctx(t), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].ID != first.ID {
		t.Errorf("after a refused create the records are %v", list)
	}
	if o := Ops(t, s, second.ID); len(o) != 0 {
		t.Errorf("a refused create wrote %d journal entries", len(o))
	}
}

func testCreateSandboxRequestIDReplay(t *testing.T, open Opener) {
	s := fresh(t, open)
	first := NewSandbox("web", T0)
	first.RequestID = "req-1"
	firstReq := Create(t, s, first)

	retry := NewSandbox("web", T0.Add(time.Second))
	retry.RequestID = "req-1"
	retryReq := NewOp(retry.ID, sandbox.OpCreate, "me", retry.CreatedAt)
	got, created, err := s.CreateSandbox(Ctx(t), retry, retryReq)
	if err != nil {
		t.Fatalf("replayed create: %v", err)
	}
	if created {
		t.Error("replayed create reports created=true")
	}
	if got.ID != first.ID || !got.CreatedAt.Equal(T0) {
		t.Errorf("replayed create returned %s created %v, want the first record %s", got.ID, got.CreatedAt, first.ID)
	}
	if got.LastRequest == nil || got.LastRequest.ID != firstReq.ID {
		t.Errorf("replayed create LastRequest = %+v, want the first request %d", got.LastRequest, firstReq.ID)
	}
	if retryReq.ID != 0 {
		t.Errorf("replayed create inserted its request (id %d)", retryReq.ID)
	}
	list, err := s.ListSandboxes(Ctx(t), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 {
		t.Errorf("after a replayed create there are %d records, want 1", len(list))
	}
	if o := Ops(t, s, first.ID); len(o) != 1 {
		t.Errorf("after a replayed create the journal has %d entries, want 1", len(o))
	}
	if o := Ops(t, s, retry.ID); len(o) != 0 {
		t.Errorf("replayed create journaled %d entries under the new id", len(o))
	}
}

func testCreateSandboxRequestIDOtherName(t *testing.T, open Opener) {
	s := fresh(t, open)
	first := NewSandbox("web", T0)
	first.RequestID = "req-1"
	Create(t, s, first)

	other := NewSandbox("db", T0)
	other.RequestID = "req-1"
	_, _, err := s.CreateSandbox(Ctx(t), other, NewOp(other.ID, sandbox.OpCreate, "me", T0))
	if !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("reusing a request id for another name = %v, want ErrFailedPrecondition", err)
	}
	if _, err := s.GetSandboxByName(Ctx(t), "", "db"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("GetSandboxByName(db) after a refused create = %v, want ErrNotFound", err)
	}
	if o := Ops(t, s, other.ID); len(o) != 0 {
		t.Errorf("a refused create wrote %d journal entries", len(o))
	}
}

func testMutateSupersedesPendingRequest(t *testing.T, open Opener) {
	s := fresh(t, open)
	sb := NewSandbox("web", T0)
	createReq := Create(t, s, sb)
	driverOp := Put(t, s, NewOp(sb.ID, sandbox.OpDriverCreate, "me", T0))

	at := T0.Add(10 * time.Second)
	stop := NewOp(sb.ID, sandbox.OpStop, "me", at)
	got, err := s.Mutate(Ctx(t), sb.ID, func(sb *sandbox.Sandbox) (store.Mutation, error) {
		sb.Desired = sandbox.DesiredStopped
		sb.UpdatedAt = at
		sb.Deadline = at.Add(time.Minute)
		return store.Mutation{Request: stop}, nil
	})
	if err != nil {
		t.Fatalf("Mutate: %v", err)
	}
	if got.Revision != 2 || got.Desired != sandbox.DesiredStopped {
		t.Errorf("Mutate returned revision %d desired %s", got.Revision, got.Desired)
	}
	if got.LastRequest == nil || got.LastRequest.ID != stop.ID || stop.ID == 0 {
		t.Errorf("Mutate LastRequest = %+v, want the stop request", got.LastRequest)
	}
	stored := Get(t, s, sb.ID)
	if stored.Revision != 2 || stored.Desired != sandbox.DesiredStopped || !stored.UpdatedAt.Equal(at) {
		t.Errorf("stored record = %+v", stored)
	}

	old := OpByID(t, s, sb.ID, createReq.ID)
	if old.State != sandbox.OpSuperseded {
		t.Errorf("old create request is %s, want superseded", old.State)
	}
	if !old.FinishedAt.Equal(at) {
		t.Errorf("old create request finished at %v, want %v", old.FinishedAt, at)
	}
	if !strings.Contains(old.Detail, "stop") {
		t.Errorf("old create request detail %q does not name what superseded it", old.Detail)
	}
	if o := OpByID(t, s, sb.ID, stop.ID); o.State != sandbox.OpPending || o.Kind != sandbox.OpStop {
		t.Errorf("new request is %s %s, want a pending stop", o.Kind, o.State)
	}
	if o := OpByID(t, s, sb.ID, driverOp.ID); o.State != sandbox.OpPending {
		t.Errorf("driver entry is %s, want it left pending", o.State)
	}
	if n := len(Ops(t, s, sb.ID)); n != 3 {
		t.Errorf("journal has %d entries, want 3", n)
	}
}

func testMutateCallbackErrorRollsBack(t *testing.T, open Opener) {
	s := fresh(t, open)
	sb := NewSandbox("web", T0)
	createReq := Create(t, s, sb)

	boom := errors.New("boom")
	_, err := s.Mutate(Ctx(t), sb.ID, func(sb *sandbox.Sandbox) (store.Mutation, error) {
		sb.Desired = sandbox.DesiredDeleted
		sb.Phase = sandbox.PhaseDeleting
		return store.Mutation{Request: NewOp(sb.ID, sandbox.OpDelete, "me", T0)}, boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Mutate = %v, want the callback's error", err)
	}
	stored := Get(t, s, sb.ID)
	if stored.Revision != 1 || stored.Desired != sandbox.DesiredRunning || stored.Phase != sandbox.PhaseProvisioning {
		t.Errorf("after a failed Mutate the record is %+v", stored)
	}
	journal := Ops(t, s, sb.ID)
	if len(journal) != 1 || journal[0].ID != createReq.ID || journal[0].State != sandbox.OpPending {
		t.Errorf("after a failed Mutate the journal is %+v", journal)
	}
}

// A new policy (UpdateSandbox) is the one part of a spec that changes.
func testMutateStoresTheSpec(t *testing.T, open Opener) {
	s := fresh(t, open)
	sb := NewSandbox("web", T0)
	Create(t, s, sb)
	if _, err := s.Mutate(Ctx(t), sb.ID, func(sb *sandbox.Sandbox) (store.Mutation, error) {
		sb.Spec.Policy = "version: 1\n"
		return store.Mutation{}, nil
	}); err != nil {
		t.Fatal(err)
	}
	if got := Get(t, s, sb.ID).Spec.Policy; got != "version: 1\n" {
		t.Errorf("policy after Mutate = %q", got)
	}
}

// A write that fails after the record was updated and the old request
// superseded must take both back.
func testMutateFailedJournalWriteRollsBack(t *testing.T, open Opener) {
	s := fresh(t, open)
	sb := NewSandbox("web", T0)
	createReq := Create(t, s, sb)

	bad := NewOp(sb.ID, sandbox.OpStop, "me", T0)
	bad.Deadline = time.Time{}
	_, err := s.Mutate(Ctx(t), sb.ID, func(sb *sandbox.Sandbox) (store.Mutation, error) {
		sb.Desired = sandbox.DesiredStopped
		sb.UpdatedAt = T0.Add(time.Second)
		return store.Mutation{Request: bad}, nil
	})
	if err == nil {
		t.Fatal("Mutate with a request without deadline succeeded")
	}
	stored := Get(t, s, sb.ID)
	if stored.Revision != 1 || stored.Desired != sandbox.DesiredRunning || !stored.UpdatedAt.Equal(T0) {
		t.Errorf("after a failed Mutate the record is %+v", stored)
	}
	journal := Ops(t, s, sb.ID)
	if len(journal) != 1 || journal[0].ID != createReq.ID {
		t.Fatalf("after a failed Mutate the journal is %+v", journal)
	}
	if journal[0].State != sandbox.OpPending || !journal[0].FinishedAt.IsZero() || journal[0].Detail != "" {
		t.Errorf("after a failed Mutate the create request is %+v, want it still pending", journal[0])
	}
}

func testMutateExitCodeAndRestarts(t *testing.T, open Opener) {
	s := fresh(t, open)
	sb := NewSandbox("web", T0)
	Create(t, s, sb)
	if got := Get(t, s, sb.ID); got.ExitCode != nil || got.Restarts != 0 {
		t.Fatalf("new record has exit code %v and %d restarts, want none", got.ExitCode, got.Restarts)
	}
	for _, code := range []int{0, 137} {
		_, err := s.Mutate(Ctx(t), sb.ID, func(sb *sandbox.Sandbox) (store.Mutation, error) {
			sb.Phase = sandbox.PhaseExited
			sb.ExitCode = &code
			sb.Restarts++
			return store.Mutation{}, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		got := Get(t, s, sb.ID)
		if got.ExitCode == nil || *got.ExitCode != code || got.Phase != sandbox.PhaseExited {
			t.Errorf("after exit %d the record has exit code %v, phase %s", code, got.ExitCode, got.Phase)
		}
	}
	_, err := s.Mutate(Ctx(t), sb.ID, func(sb *sandbox.Sandbox) (store.Mutation, error) {
		sb.Phase, sb.ExitCode = sandbox.PhaseReady, nil
		return store.Mutation{}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := Get(t, s, sb.ID); got.ExitCode != nil || got.Restarts != 2 {
		t.Errorf("after a restart the record has exit code %v and %d restarts, want none and 2", got.ExitCode, got.Restarts)
	}
}

func testMutateMissing(t *testing.T, open Opener) {
	s := fresh(t, open)
	called := false
	_, err := s.Mutate(Ctx(t), "nope", func(sb *sandbox.Sandbox) (store.Mutation, error) {
		called = true
		return store.Mutation{}, nil
	})
	if !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Mutate of a missing record = %v, want ErrNotFound", err)
	}
	if called {
		t.Error("Mutate called fn for a missing record")
	}
}

// MutateNamed finds a record as a caller names it: by name first (even a
// name that is another sandbox's id), else by id.
func testMutateNamed(t *testing.T, open Opener) {
	s := fresh(t, open)
	first := NewSandbox("web", T0)
	Create(t, s, first)
	second := NewSandbox(first.ID, T0) // named as the first one's id
	Create(t, s, second)
	mutated := func(key string) string {
		t.Helper()
		got, err := s.MutateNamed(Ctx(t), "", key, func(sb *sandbox.Sandbox) (store.Mutation, error) {
			sb.Reason = "changed through " + key
			return store.Mutation{}, nil
		})
		if err != nil {
			t.Fatalf("MutateNamed(%q): %v", key, err)
		}
		if stored := Get(t, s, got.ID); stored.Reason != "changed through "+key {
			t.Fatalf("MutateNamed(%q) changed %s, but the stored record's reason is %q", key, got.ID, stored.Reason)
		}
		return got.ID
	}
	if id := mutated("web"); id != first.ID {
		t.Errorf("by name: changed %s, want %s", id, first.ID)
	}
	if id := mutated(first.ID); id != second.ID {
		t.Errorf("by a name that is also an id: changed %s, want the one of that name, %s", id, second.ID)
	}
	if id := mutated(second.ID); id != second.ID {
		t.Errorf("by id: changed %s, want %s", id, second.ID)
	}
	_, err := s.MutateNamed(Ctx(t), "", "nope", func(sb *sandbox.Sandbox) (store.Mutation, error) {
		t.Error("MutateNamed called fn for a missing record")
		return store.Mutation{}, nil
	})
	if !errors.Is(err, errdefs.ErrNotFound) || !strings.Contains(err.Error(), `nope`) {
		t.Errorf("MutateNamed of a missing record = %v, want ErrNotFound naming it", err)
	}
}

func testMutateSettleRequests(t *testing.T, open Opener) {
	s := fresh(t, open)
	sb := NewSandbox("web", T0)
	createReq := Create(t, s, sb)
	failedAt := T0.Add(time.Second)
	failed := NewOp(sb.ID, sandbox.OpStart, "me", T0)
	failed.State, failed.FinishedAt, failed.Error = sandbox.OpFailed, failedAt, "no luck"
	Put(t, s, failed)
	driverOp := Put(t, s, NewOp(sb.ID, sandbox.OpDriverStart, "me", T0))

	at := T0.Add(time.Minute)
	got, err := s.Mutate(Ctx(t), sb.ID, func(sb *sandbox.Sandbox) (store.Mutation, error) {
		sb.Phase = sandbox.PhaseReady
		sb.UpdatedAt = at
		return store.Mutation{SettleRequests: sandbox.OpSucceeded}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got.Phase != sandbox.PhaseReady {
		t.Errorf("Mutate returned phase %s", got.Phase)
	}
	if o := OpByID(t, s, sb.ID, createReq.ID); o.State != sandbox.OpSucceeded || !o.FinishedAt.Equal(at) {
		t.Errorf("pending create request is %s finished %v, want succeeded at %v", o.State, o.FinishedAt, at)
	}
	if o := OpByID(t, s, sb.ID, failed.ID); o.State != sandbox.OpFailed || !o.FinishedAt.Equal(failedAt) || o.Error != "no luck" {
		t.Errorf("settled request was changed: %+v", o)
	}
	if o := OpByID(t, s, sb.ID, driverOp.ID); o.State != sandbox.OpPending || !o.FinishedAt.IsZero() {
		t.Errorf("driver entry is %s, want it left pending", o.State)
	}
}

func testPutOperationUpdates(t *testing.T, open Opener) {
	s := fresh(t, open)
	sb := NewSandbox("web", T0)
	Create(t, s, sb)
	op := NewOp(sb.ID, sandbox.OpDriverStart, "me", T0)
	op.Epoch = 7
	Put(t, s, op)
	id := op.ID
	op.State, op.FinishedAt, op.Error, op.Attempt, op.Epoch = sandbox.OpFailed, T0.Add(time.Second), "boom", 2, 8
	Put(t, s, op)
	if op.ID != id {
		t.Errorf("update changed the id from %d to %d", id, op.ID)
	}
	journal := Ops(t, s, sb.ID)
	if len(journal) != 2 {
		t.Fatalf("journal has %d entries, want 2", len(journal))
	}
	got := journal[1]
	if got.ID != id || got.State != sandbox.OpFailed || got.Error != "boom" || got.Attempt != 2 || got.Epoch != 8 || !got.FinishedAt.Equal(T0.Add(time.Second)) {
		t.Errorf("updated entry = %+v", got)
	}
}

func testPutOperationNeedsSandbox(t *testing.T, open Opener) {
	s := fresh(t, open)
	if err := s.PutOperation(Ctx(t), NewOp(sandbox.NewID(), sandbox.OpDriverStart, "me", T0)); err == nil {
		t.Error("PutOperation for a sandbox that does not exist succeeded; foreign keys are off")
	}
}

func testSettlePendingByOwner(t *testing.T, open Opener) {
	for _, tc := range []struct {
		name     string
		owners   store.Owners
		settled  []string // owners whose pending entries are settled
		untouchd []string
	}{
		{"is not me", store.Owners{IsNot: "me"}, []string{"other", "third"}, []string{"me"}},
		{"is me", store.Owners{Is: "me"}, []string{"me"}, []string{"other", "third"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := fresh(t, open)
			sb := NewSandbox("web", T0)
			Create(t, s, sb) // pending, owner me
			pending := map[string][]*sandbox.Operation{}
			for _, owner := range []string{"me", "other", "third"} {
				pending[owner] = append(pending[owner], Put(t, s, NewOp(sb.ID, sandbox.OpDriverStart, owner, T0)))
			}
			withErr := NewOp(sb.ID, sandbox.OpDriverStop, "other", T0)
			withErr.Error = "slow"
			pending["other"] = append(pending["other"], Put(t, s, withErr))
			withErr2 := NewOp(sb.ID, sandbox.OpDriverStop, "me", T0)
			withErr2.Error = "slow"
			pending["me"] = append(pending["me"], Put(t, s, withErr2))
			done := NewOp(sb.ID, sandbox.OpStart, "other", T0)
			done.State, done.FinishedAt = sandbox.OpSucceeded, T0.Add(time.Second)
			Put(t, s, done)
			doneMe := NewOp(sb.ID, sandbox.OpStart, "me", T0)
			doneMe.State, doneMe.FinishedAt = sandbox.OpSucceeded, T0.Add(time.Second)
			Put(t, s, doneMe)

			at := T0.Add(time.Hour)
			n, err := s.SettlePending(Ctx(t), tc.owners, sandbox.OpInterrupted, at, "gateway restarted")
			if err != nil {
				t.Fatal(err)
			}
			want := 0
			for _, owner := range tc.settled {
				want += len(pending[owner])
			}
			if slices.Contains(tc.settled, "me") {
				want++ // the create request
			}
			if n != want {
				t.Errorf("SettlePending settled %d entries, want %d", n, want)
			}

			byID := map[int64]*sandbox.Operation{}
			for _, o := range Ops(t, s, sb.ID) {
				byID[o.ID] = o
			}
			for _, owner := range tc.settled {
				for _, p := range pending[owner] {
					o := byID[p.ID]
					if o.State != sandbox.OpInterrupted || !o.FinishedAt.Equal(at) {
						t.Errorf("%s's entry %d is %s finished %v, want interrupted at %v", owner, o.ID, o.State, o.FinishedAt, at)
					}
					wantErr := "gateway restarted"
					if p.Error != "" {
						wantErr = p.Error + "; gateway restarted"
					}
					if o.Error != wantErr {
						t.Errorf("%s's entry %d has error %q, want %q", owner, o.ID, o.Error, wantErr)
					}
				}
			}
			for _, owner := range tc.untouchd {
				for _, p := range pending[owner] {
					if o := byID[p.ID]; o.State != sandbox.OpPending || !o.FinishedAt.IsZero() || o.Error != p.Error {
						t.Errorf("%s's entry %d was changed: %+v", owner, o.ID, o)
					}
				}
			}
			for _, d := range []*sandbox.Operation{done, doneMe} {
				if o := byID[d.ID]; o.State != sandbox.OpSucceeded || !o.FinishedAt.Equal(d.FinishedAt) || o.Error != "" {
					t.Errorf("settled entry %d was changed: %+v", o.ID, o)
				}
			}
		})
	}
}

func testDeleteSandbox(t *testing.T, open Opener) {
	s := fresh(t, open)
	sb := NewSandbox("web", T0)
	Create(t, s, sb)
	Put(t, s, NewOp(sb.ID, sandbox.OpDriverCreate, "me", T0))
	keep := NewSandbox("db", T0)
	Create(t, s, keep)

	if err := s.DeleteSandbox(Ctx(t), sb.ID); err != nil {
		t.Fatalf("DeleteSandbox: %v", err)
	}
	_, err := s.GetSandbox(Ctx(t), sb.ID)
	if !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("GetSandbox after delete = %v, want ErrNotFound", err)
	}
	if want := `sandbox "` + sb.ID + `" not found`; err.Error() != want {
		t.Errorf("GetSandbox after delete says %q, want %q", err, want)
	}
	if _, err := s.GetSandboxByName(Ctx(t), "", "web"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("GetSandboxByName after delete = %v, want ErrNotFound", err)
	}
	if o := Ops(t, s, sb.ID); len(o) != 0 {
		t.Errorf("journal of a deleted sandbox has %d entries", len(o))
	}
	if o := Ops(t, s, keep.ID); len(o) != 1 {
		t.Errorf("deleting one sandbox changed another's journal: %d entries", len(o))
	}
	Get(t, s, keep.ID)
	if err := s.DeleteSandbox(Ctx(t), sb.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("second DeleteSandbox = %v, want ErrNotFound", err)
	}
	// The name is free again.
	Create(t, s, NewSandbox("web", T0.Add(time.Second)))
}

func testListSandboxesLastRequest(t *testing.T, open Opener) {
	s := fresh(t, open)
	a := NewSandbox("a", T0)
	Create(t, s, a)
	b := NewSandbox("b", T0.Add(time.Second))
	bCreate := Create(t, s, b)
	start := Put(t, s, NewOp(a.ID, sandbox.OpStart, "me", T0.Add(2*time.Second)))
	Put(t, s, NewOp(a.ID, sandbox.OpDriverStart, "me", T0.Add(3*time.Second)))
	Put(t, s, NewOp(b.ID, sandbox.OpDriverCreate, "me", T0.Add(3*time.Second)))

	list, err := s.ListSandboxes(Ctx(t), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].ID != a.ID || list[1].ID != b.ID {
		t.Fatalf("ListSandboxes = %v, want a then b", list)
	}
	if lr := list[0].LastRequest; lr == nil || lr.ID != start.ID || lr.Kind != sandbox.OpStart {
		t.Errorf("a's LastRequest = %+v, want the start request %d", lr, start.ID)
	}
	if lr := list[1].LastRequest; lr == nil || lr.ID != bCreate.ID || lr.Kind != sandbox.OpCreate {
		t.Errorf("b's LastRequest = %+v, want the create request %d", lr, bCreate.ID)
	}
	if lr := Get(t, s, a.ID).LastRequest; lr == nil || lr.ID != start.ID {
		t.Errorf("GetSandbox(a).LastRequest = %+v, want the start request %d", lr, start.ID)
	}
}

// A store's identity is made once, kept across opens, and another store's
// differs.
func testIdentityIsMadeOnceAndKept(t *testing.T, open Opener) {
	s := open(t, "kept")
	id, err := s.Identity(Ctx(t))
	if err != nil || len(id) != 16 {
		t.Fatalf("Identity = %q, %v; want 16 hex digits", id, err)
	}
	s.Close()
	again, err := open(t, "kept").Identity(Ctx(t))
	if err != nil || again != id {
		t.Errorf("after a reopen Identity = %q, %v; want %q", again, err, id)
	}
	if other, err := fresh(t, open).Identity(Ctx(t)); err != nil || other == id {
		t.Errorf("another store's identity = %q, %v; want another than %q", other, err, id)
	}
}

// How a sandbox is paused is kept with its record, across a reopening,
// and read by name as by id.
func testPauseMemoryKept(t *testing.T, open Opener) {
	s := open(t, "kept")
	sb := NewSandbox("web", T0)
	Create(t, s, sb)
	if got := Get(t, s, sb.ID); got.PauseMemory {
		t.Fatal("a new record says it is paused with memory")
	}
	if _, err := s.Mutate(Ctx(t), sb.ID, func(sb *sandbox.Sandbox) (store.Mutation, error) {
		sb.Desired, sb.Phase, sb.PauseMemory = sandbox.DesiredPaused, sandbox.PhasePausing, true
		return store.Mutation{}, nil
	}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = open(t, "kept")
	if got := Get(t, s, sb.ID); !got.PauseMemory || got.Desired != sandbox.DesiredPaused {
		t.Errorf("reopened: pause_memory %v, desired %s; want true, paused", got.PauseMemory, got.Desired)
	}
	if got, err := s.GetSandboxByName(Ctx(t), "default", "web"); err != nil || !got.PauseMemory {
		t.Errorf("by name: %+v, %v; want it paused with memory", got, err)
	}
	if list, err := s.ListSandboxes(Ctx(t), ""); err != nil || len(list) != 1 || !list[0].PauseMemory {
		t.Errorf("listed: %v; want the one paused with memory", err)
	}
}
