package sqlite

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/store"
	"github.com/corral-sandbox/corral/internal/store/sqlstore"
	"github.com/corral-sandbox/corral/internal/store/storetest"
)

// holdWriter makes the writer run a job that waits until the returned
// release is called, so that the writes asked meanwhile queue up and go
// into the next commit together.
func holdWriter(t *testing.T, s *Store) (release func()) {
	t.Helper()
	started, gate := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- s.w.write(context.Background(), func(sqlstore.Querier) error {
			close(started)
			<-gate
			return nil
		})
	}()
	<-started
	return func() {
		close(gate)
		if err := <-done; err != nil {
			t.Errorf("the holding write: %v", err)
		}
	}
}

// enqueue starts write in a goroutine and returns once its job is in the
// writer's queue (the queue held n jobs before), so jobs queue in the
// order they were enqueued. The outcome arrives on the channel.
func enqueue(t *testing.T, s *Store, n int, write func() error) <-chan error {
	t.Helper()
	out := make(chan error, 1)
	go func() { out <- write() }()
	for i := 0; s.w.Queued() == n; i++ {
		if i > 10000 {
			t.Fatalf("the write did not queue up (queue %d)", s.w.Queued())
		}
		time.Sleep(time.Millisecond)
	}
	return out
}

// Writes that queue while the writer is busy commit together, each in its
// own savepoint: the failing ones get their own errors and leave nothing
// behind, the others are all there, and a later write of the batch sees an
// earlier one.
func TestGroupCommitSavepoints(t *testing.T) {
	s := newStore(t)
	taken := storetest.NewSandbox("taken", storetest.T0)
	storetest.Create(t, s, taken)
	writes, commits := s.w.Writes.Load(), s.w.Commits.Load()

	release := holdWriter(t, s)
	a := storetest.NewSandbox("a", storetest.T0)
	dup := storetest.NewSandbox("taken", storetest.T0)
	half := storetest.NewSandbox("half", storetest.T0) // its request has no deadline: fails after its insert
	halfReq := storetest.NewOp(half.ID, sandbox.OpCreate, "me", storetest.T0)
	halfReq.Deadline = time.Time{}
	b := storetest.NewSandbox("b", storetest.T0)
	var outs []<-chan error
	for i, write := range []func() error{
		func() error {
			_, _, err := s.CreateSandbox(testCtx(t), a, storetest.NewOp(a.ID, sandbox.OpCreate, "me", storetest.T0))
			return err
		},
		func() error {
			_, _, err := s.CreateSandbox(testCtx(t), dup, storetest.NewOp(dup.ID, sandbox.OpCreate, "me", storetest.T0))
			return err
		},
		func() error { _, _, err := s.CreateSandbox(testCtx(t), half, halfReq); return err },
		func() error { // sees a, created earlier in the same batch
			_, err := s.Mutate(testCtx(t), a.ID, func(sb *sandbox.Sandbox) (store.Mutation, error) {
				sb.Desired = sandbox.DesiredStopped
				return store.Mutation{Request: storetest.NewOp(a.ID, sandbox.OpStop, "me", storetest.T0)}, nil
			})
			return err
		},
		func() error {
			_, err := s.Mutate(testCtx(t), a.ID, func(*sandbox.Sandbox) (store.Mutation, error) {
				return store.Mutation{}, errors.New("callback refuses")
			})
			return err
		},
		func() error {
			_, _, err := s.CreateSandbox(testCtx(t), b, storetest.NewOp(b.ID, sandbox.OpCreate, "me", storetest.T0))
			return err
		},
	} {
		outs = append(outs, enqueue(t, s, i, write))
	}
	release()

	want := []func(error) bool{
		func(err error) bool { return err == nil },
		func(err error) bool { return errors.Is(err, errdefs.ErrAlreadyExists) },
		func(err error) bool { return err != nil && !errors.Is(err, errdefs.ErrAlreadyExists) },
		func(err error) bool { return err == nil },
		func(err error) bool { return err != nil && err.Error() == "callback refuses" },
		func(err error) bool { return err == nil },
	}
	for i, out := range outs {
		if err := <-out; !want[i](err) {
			t.Errorf("write %d of the batch: unexpected outcome %v", i, err)
		}
	}
	if got := s.w.Commits.Load() - commits; got != 2 {
		t.Errorf("%d commits, want 2: the holding write's and one for the six queued behind it", got)
	}
	if got := s.w.Writes.Load() - writes; got != 7 {
		t.Errorf("%d writes counted, want 7", got)
	}

	if sb := storetest.Get(t, s, a.ID); sb.Desired != sandbox.DesiredStopped || sb.Revision != 2 {
		t.Errorf("a is %s at revision %d, want stopped at revision 2", sb.Desired, sb.Revision)
	}
	if journal := storetest.Ops(t, s, a.ID); len(journal) != 2 || journal[0].State != sandbox.OpSuperseded || journal[1].Kind != sandbox.OpStop {
		t.Errorf("journal of a: %+v", journal)
	}
	storetest.Get(t, s, b.ID)
	if _, err := s.GetSandbox(testCtx(t), half.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("the half-done create left its record behind: %v", err)
	}
	list, err := s.ListSandboxes(testCtx(t), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 3 {
		t.Errorf("%d records, want taken, a and b", len(list))
	}
}

// A caller that gives up while its write waits in the queue gets its
// context's error, and the write is never made.
func TestGroupCommitAbandonedWrite(t *testing.T) {
	s := newStore(t)
	release := holdWriter(t, s)
	sb := storetest.NewSandbox("gone", storetest.T0)
	ctx, cancel := context.WithCancel(testCtx(t))
	out := enqueue(t, s, 0, func() error {
		_, _, err := s.CreateSandbox(ctx, sb, storetest.NewOp(sb.ID, sandbox.OpCreate, "me", storetest.T0))
		return err
	})
	cancel()
	if err := <-out; !errors.Is(err, context.Canceled) {
		t.Errorf("abandoned write = %v, want context.Canceled", err)
	}
	release()
	kept := storetest.NewSandbox("kept", storetest.T0)
	storetest.Create(t, s, kept) // the writer goes on
	if _, err := s.GetSandbox(testCtx(t), sb.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("the abandoned write was made: %v", err)
	}
}

// Close commits the writes queued before it and refuses later ones.
func TestCloseCommitsQueuedWrites(t *testing.T) {
	path := t.TempDir() + "/corral.db"
	s, err := Open(testCtx(t), path)
	if err != nil {
		t.Fatal(err)
	}
	release := holdWriter(t, s)
	sb := storetest.NewSandbox("queued", storetest.T0)
	out := enqueue(t, s, 0, func() error {
		_, _, err := s.CreateSandbox(testCtx(t), sb, storetest.NewOp(sb.ID, sandbox.OpCreate, "me", storetest.T0))
		return err
	})
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	release()
	if err := <-out; err != nil {
		t.Fatalf("write queued before Close: %v", err)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if err := s.PutOperation(testCtx(t), storetest.NewOp(sb.ID, sandbox.OpStop, "me", storetest.T0)); !errors.Is(err, sqlstore.ErrClosed) {
		t.Errorf("write after Close = %v, want ErrClosed", err)
	}
	storetest.Get(t, openStore(t, path), sb.ID)
}

// The read pool cannot write, whatever it is asked.
func TestReadPoolIsReadOnly(t *testing.T) {
	s := newStore(t)
	if _, err := s.r.Exec(bg, "CREATE TABLE x (y INTEGER)"); err == nil {
		t.Error("a read connection wrote")
	}
}

// The record Mutate returns carries the last request as the store now has
// it, whatever the mutation did to the requests.
func TestMutateReturnsTheStoredLastRequest(t *testing.T) {
	s := newStore(t)
	sb := storetest.NewSandbox("web", storetest.T0)
	storetest.Create(t, s, sb)
	at := storetest.T0
	for name, mutation := range map[string]func() store.Mutation{
		"nothing": func() store.Mutation { return store.Mutation{} },
		"a request": func() store.Mutation {
			return store.Mutation{Request: storetest.NewOp(sb.ID, sandbox.OpStop, "me", at)}
		},
		"settle":         func() store.Mutation { return store.Mutation{SettleRequests: sandbox.OpSucceeded} },
		"settle nothing": func() store.Mutation { return store.Mutation{SettleRequests: sandbox.OpFailed} },
		"both": func() store.Mutation {
			return store.Mutation{Request: storetest.NewOp(sb.ID, sandbox.OpStart, "me", at), SettleRequests: sandbox.OpSucceeded}
		},
		"a driver entry": func() store.Mutation {
			return store.Mutation{Put: []*sandbox.Operation{storetest.NewOp(sb.ID, sandbox.OpDriverStart, "me", at)}}
		},
	} {
		at = at.Add(time.Second)
		got, err := s.Mutate(testCtx(t), sb.ID, func(cur *sandbox.Sandbox) (store.Mutation, error) {
			cur.UpdatedAt = at
			return mutation(), nil
		})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		stored := storetest.Get(t, s, sb.ID).LastRequest
		if r := got.LastRequest; r == nil || r.ID != stored.ID || r.State != stored.State || r.Kind != stored.Kind ||
			!r.FinishedAt.Equal(stored.FinishedAt) || r.Detail != stored.Detail {
			t.Errorf("%s: Mutate returned last request %+v, the store has %+v", name, got.LastRequest, stored)
		}
	}
	_, err := s.Mutate(testCtx(t), sb.ID, func(*sandbox.Sandbox) (store.Mutation, error) {
		return store.Mutation{Put: []*sandbox.Operation{storetest.NewOp(sb.ID, sandbox.OpStop, "me", at)}}, nil
	})
	if err == nil {
		t.Error("Mutate put a request through Put")
	}
}
