package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/internal/driver/fake/faults"
	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

func (h *harness) createPool(name string, size int) {
	h.t.Helper()
	if _, err := h.m.Pools().CreatePool(context.Background(), name, size, sandbox.Spec{}); err != nil {
		h.t.Fatalf("create pool %s: %v", name, err)
	}
}

func (h *harness) pool(name string) *PoolStatus {
	h.t.Helper()
	list, err := h.m.Pools().ListPools(context.Background())
	if err != nil {
		h.t.Fatal(err)
	}
	for _, p := range list {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// waitPool waits until the pool has exactly size members, all ready.
func (h *harness) waitPool(name string, size int) {
	h.t.Helper()
	h.waitFor(fmt.Sprintf("pool %s with %d ready", name, size), func() bool {
		p := h.pool(name)
		return p != nil && p.Ready == size && p.Members == size
	})
}

func (h *harness) claim(name, pool string) *Claimed {
	h.t.Helper()
	c, err := h.m.Pools().Claim(context.Background(), name, "", pool, sandbox.Spec{Labels: map[string]string{"owner": name}})
	if err != nil {
		h.t.Fatalf("claim %s from %s: %v", name, pool, err)
	}
	return c
}

func TestPoolClaimRefills(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, nil)
		h.createPool("warm", 2)
		h.waitPool("warm", 2)
		c := h.claim("mine", "warm")
		if !c.FromPool || !c.Created || c.Reason != "" {
			t.Fatalf("claim = %+v, want one from the pool", c)
		}
		sb := c.Sandbox
		if sb.Name != "mine" || sb.Phase != sandbox.PhaseReady || sb.PoolOf() != "" || sb.Spec.Labels["owner"] != "mine" {
			t.Errorf("claimed record = %s %s labels %v", sb.Name, sb.Phase, sb.Spec.Labels)
		}
		if strings.Join(sb.Spec.Command, " ") != strings.Join(KeepAlive, " ") {
			t.Errorf("member command = %v, want %v", sb.Spec.Command, KeepAlive)
		}
		ops := h.journal(sb.ID)
		if last := ops[len(ops)-1]; last.Kind != sandbox.OpClaim {
			t.Errorf("last journal entry = %s, want claim", last.Kind)
		}
		// The refill yields to the claim first.
		time.Sleep(refillQuiet / 2)
		if p := h.pool("warm"); p.Members != 1 {
			t.Errorf("right after the claim the pool has %d members, want 1: the refill did not wait", p.Members)
		}
		h.waitPool("warm", 2)
		if _, err := h.m.Get(context.Background(), "mine"); err != nil {
			t.Errorf("claimed sandbox after the refill: %v", err)
		}
		list, _ := h.m.List(context.Background())
		if len(list) != 3 {
			t.Errorf("%d sandboxes, want 3 (one claimed, two members)", len(list))
		}
	})
}

// A refill has refillAtOnce members made at a time; each that becomes
// ready asks for the next.
func TestPoolRefillsAFewAtATime(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, nil)
		h.faults(faults.Rule{Op: "create", Action: "hold"})
		size := refillAtOnce + 3
		h.createPool("warm", size)
		time.Sleep(time.Second) // the bubble's clock: the pool loop has run
		if p := h.pool("warm"); p.Members != refillAtOnce {
			t.Errorf("with every create held the pool has %d members, want the %d being made", p.Members, refillAtOnce)
		}
		h.faults()
		h.waitPool("warm", size)
	})
}

func TestPoolClaimWhenEmptyIsCold(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, nil)
		h.faults(faults.Rule{Op: "create", Action: "hold"})
		h.createPool("warm", 1)
		c := h.claim("cold", "warm")
		if c.FromPool || !c.Created || !strings.Contains(c.Reason, `pool "warm" had no ready sandbox`) {
			t.Fatalf("claim = %+v, want a cold create that says why", c)
		}
		if c.Sandbox.PoolOf() != "" || c.Sandbox.Spec.Labels["owner"] != "cold" || len(c.Sandbox.Spec.Command) == 0 {
			t.Errorf("cold sandbox spec = %+v, want the pool's with the claim's labels", c.Sandbox.Spec)
		}
		h.faults()
		h.waitPhase("cold", sandbox.PhaseReady)
		h.waitPool("warm", 1)
	})
}

func TestConcurrentClaimsNeverShareAMember(t *testing.T) {
	bubble(t, func(t *testing.T) {
		const members, claims = 3, 8
		h := newHarness(t, nil)
		h.createPool("warm", members)
		h.waitPool("warm", members)
		// Refills and cold creates stay provisioning, so exactly the
		// ready members can be claimed.
		h.faults(faults.Rule{Op: "create", Action: "hold"})
		answers := make(chan *Claimed, claims)
		for i := range claims {
			go func() {
				c, err := h.m.Pools().Claim(context.Background(), fmt.Sprintf("c%d", i), "", "warm", sandbox.Spec{})
				if err != nil {
					t.Errorf("claim %d: %v", i, err)
				}
				answers <- c
			}()
		}
		var results []*Claimed
		for range claims {
			if c := <-answers; c != nil {
				results = append(results, c)
			}
		}
		ids := map[string]string{}
		fromPool := 0
		for _, c := range results {
			if other, ok := ids[c.Sandbox.ID]; ok {
				t.Errorf("sandbox %s given to %s and %s", c.Sandbox.ID, other, c.Sandbox.Name)
			}
			ids[c.Sandbox.ID] = c.Sandbox.Name
			if c.FromPool {
				fromPool++
			}
		}
		if len(results) != claims || fromPool != members {
			t.Errorf("%d claims answered, %d from the pool; want %d and %d", len(results), fromPool, claims, members)
		}
		h.faults()
		h.waitPool("warm", members)
	})
}

func TestPoolSurvivesRestartAndRefills(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, nil)
		h.createPool("warm", 2)
		h.waitPool("warm", 2)
		h.faults(faults.Rule{Op: "create", Action: "hold"})
		h.claim("mine", "warm")
		h.restart()
		h.faults()
		h.waitPool("warm", 2)
		if p := h.pool("warm"); p.Size != 2 || strings.Join(p.Spec.Command, " ") != strings.Join(KeepAlive, " ") {
			t.Errorf("pool after restart = %+v", p.Pool)
		}
		h.waitPhase("mine", sandbox.PhaseReady)
	})
}

func TestPoolDeleteKeepsClaimed(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, nil)
		h.createPool("warm", 2)
		h.waitPool("warm", 2)
		h.claim("mine", "warm")
		ps, err := h.m.Pools().DeletePool(context.Background(), "warm")
		if err != nil {
			t.Fatal(err)
		}
		if ps.Members == 0 {
			t.Errorf("pool delete found no members to delete")
		}
		h.waitFor("only the claimed sandbox left", func() bool {
			list, _ := h.m.List(context.Background())
			return len(list) == 1 && list[0].Name == "mine"
		})
		if h.pool("warm") != nil {
			t.Error("pool still listed after delete")
		}
		if _, err := h.m.Pools().Claim(context.Background(), "x", "", "warm", sandbox.Spec{}); !errors.Is(err, errdefs.ErrNotFound) || !strings.Contains(err.Error(), `pool "warm"`) {
			t.Errorf("claim from a deleted pool: %v, want not found naming the pool", err)
		}
	})
}

func TestPoolErrors(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, nil)
		h.createPool("warm", 1)
		if _, err := h.m.Pools().CreatePool(context.Background(), "warm", 1, sandbox.Spec{}); !errors.Is(err, errdefs.ErrAlreadyExists) || !strings.Contains(err.Error(), `pool "warm"`) {
			t.Errorf("second pool warm: %v, want already exists naming it", err)
		}
		if _, err := h.m.Pools().CreatePool(context.Background(), "big", 0, sandbox.Spec{}); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("pool of size 0: %v, want invalid argument", err)
		}
		if _, err := h.m.Pools().DeletePool(context.Background(), "nope"); !errors.Is(err, errdefs.ErrNotFound) || !strings.Contains(err.Error(), `pool "nope"`) {
			t.Errorf("delete unknown pool: %v, want not found naming it", err)
		}
		_, _, err := h.m.Create(context.Background(), "sneaky", "", sandbox.Spec{Command: []string{"sleep", "1"},
			Labels: map[string]string{sandbox.LabelPool: "warm"}})
		if !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("create with the pool label: %v, want invalid argument", err)
		}
		for _, spec := range []sandbox.Spec{{Image: "other"}, {Command: []string{"sh"}}, {Policy: "version: 1\n"},
			{RestartPolicy: sandbox.RestartNever}, {MaxRestarts: 3}, {Hosts: []string{"a:127.0.0.1"}}} {
			if _, err := h.m.Pools().Claim(context.Background(), "mine", "", "warm", spec); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "only its name and labels") {
				t.Errorf("a claim whose spec has %+v: %v; want invalid argument: the pool fixes the spec", spec, err)
			}
		}
		h.waitPool("warm", 1)
	})
}
