package lifecycle

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/internal/driver/fake/faults"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/store"
)

// countingStore counts the write transactions asked of a store.
type countingStore struct {
	store.Store
	writes atomic.Int64
}

func (c *countingStore) CreateSandbox(ctx context.Context, sb *sandbox.Sandbox, req *sandbox.Operation) (*sandbox.Sandbox, bool, error) {
	c.writes.Add(1)
	return c.Store.CreateSandbox(ctx, sb, req)
}

func (c *countingStore) Mutate(ctx context.Context, id string, fn func(sb *sandbox.Sandbox) (store.Mutation, error)) (*sandbox.Sandbox, error) {
	c.writes.Add(1)
	return c.Store.Mutate(ctx, id, fn)
}

func (c *countingStore) MutateNamed(ctx context.Context, tenant, nameOrID string, fn func(sb *sandbox.Sandbox) (store.Mutation, error)) (*sandbox.Sandbox, error) {
	c.writes.Add(1)
	return c.Store.MutateNamed(ctx, tenant, nameOrID, fn)
}

func (c *countingStore) PutOperation(ctx context.Context, ops ...*sandbox.Operation) error {
	c.writes.Add(1)
	return c.Store.PutOperation(ctx, ops...)
}

func (c *countingStore) DeleteSandbox(ctx context.Context, id string) error {
	c.writes.Add(1)
	return c.Store.DeleteSandbox(ctx, id)
}

// newCountingHarness is a harness whose store counts its writes.
func newCountingHarness(t *testing.T) (*harness, *countingStore) {
	counting := &countingStore{}
	h := newHarness(t, func(c *Config) {
		counting.Store = c.Store
		c.Store = counting
	})
	return h, counting
}

// A create that converges is four writes: the request; the create call's
// pending entry; its settled entry with the start call's pending one; the
// ready phase with the start call's settled entry. Each settled entry is in
// the store before the next call is made.
func TestSettledEntriesRideOnTheNextWrite(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h, counting := newCountingHarness(t)
		h.faults(faults.Rule{Op: "start", Action: "hold"})
		before := counting.writes.Load()
		sb := h.create("web")
		h.held("start", sb.ID)
		journal := h.journal(sb.ID)
		if len(journal) != 3 || journal[1].Kind != sandbox.OpDriverCreate || journal[1].State != sandbox.OpSucceeded ||
			journal[2].Kind != sandbox.OpDriverStart || journal[2].State != sandbox.OpPending {
			t.Fatalf("while the start is held the journal is %v, want the create settled before the start was made", kindsAndStates(journal))
		}
		h.faults()
		h.waitPhase("web", sandbox.PhaseReady)
		for _, op := range h.journal(sb.ID) {
			if op.State != sandbox.OpSucceeded {
				t.Errorf("once ready the journal is %v, want every entry succeeded", kindsAndStates(h.journal(sb.ID)))
				break
			}
		}
		time.Sleep(time.Second) // the bubble's clock: any later step has run
		if n := counting.writes.Load() - before; n != 4 {
			t.Errorf("create to ready took %d writes, want 4", n)
		}
	})
}

// A driver call's pending entry and the phase it runs in are one write: a
// ready sandbox whose compute vanished behind the gateway's back is made
// again, and from the driver's report to the held create call there is
// one write, the phase provisioning with the pending create.
func TestPhaseAndPendingEntryInOneWrite(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h, counting := newCountingHarness(t)
		sb := h.create("web")
		h.waitPhase("web", sandbox.PhaseReady)
		time.Sleep(time.Second) // the bubble's clock: any later step has run
		h.faults(faults.Rule{Op: "create", Action: "hold"})
		before := counting.writes.Load()
		if err := h.drv.Delete(context.Background(), sb.ID); err != nil {
			t.Fatal(err)
		}
		h.held("create", sb.ID)
		if n := counting.writes.Load() - before; n != 1 {
			t.Errorf("from the vanished compute to the held create call: %d writes, want 1", n)
		}
		got, err := h.m.Get(context.Background(), "web")
		if err != nil || got.Phase != sandbox.PhaseProvisioning {
			t.Fatalf("while the create is held the record is %+v (%v), want phase provisioning", got, err)
		}
		journal := h.journal(sb.ID)
		if last := journal[len(journal)-1]; last.Kind != sandbox.OpDriverCreate || last.State != sandbox.OpPending {
			t.Fatalf("while the create is held the journal is %v, want the create pending", kindsAndStates(journal))
		}
		h.faults()
		h.waitPhase("web", sandbox.PhaseReady)
	})
}

// A failed call's settled entry is written with the failure's reason; the
// actor leaves nothing unwritten while it waits to retry.
func TestFailedCallSettledWithTheReason(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, func(c *Config) { c.RetryBase, c.RetryMax = time.Hour, time.Hour })
		h.faults(faults.Rule{Op: "start", Action: "fail", Error: "no start today"})
		sb := h.create("web")
		h.waitFor("the failure recorded", func() bool {
			got, err := h.m.Get(context.Background(), "web")
			return err == nil && got.Reason != ""
		})
		journal := h.journal(sb.ID)
		last := journal[len(journal)-1]
		if last.Kind != sandbox.OpDriverStart || last.State != sandbox.OpFailed {
			t.Fatalf("journal = %v, want the failed start settled with the reason", kindsAndStates(journal))
		}
	})
}

func kindsAndStates(ops []*sandbox.Operation) []string {
	var out []string
	for _, op := range ops {
		out = append(out, string(op.Kind)+":"+string(op.State))
	}
	return out
}
