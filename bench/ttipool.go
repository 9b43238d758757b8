package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
	"github.com/corral-sandbox/corral/internal/testenv"
)

// ttiPool is the warm pool the pool subjects claim from.
const ttiPool = "tti"

// poolSubject is time to interactive with a claim from a warm pool of n,
// made and filled before each mode is timed (untimed), and deleted after.
// Besides the time to interactive it reports the claim alone (the create
// call's answer) and how many claims found the pool empty.
// goal is the p50 it should reach.
func poolSubject(name string, g *gateway, image string, goal time.Duration) ttiSubject {
	var (
		mu             sync.Mutex
		totals, claims []time.Duration
		cold           int
	)
	return ttiSubject{
		name: name,
		prepare: func(n int) error {
			mu.Lock()
			totals, claims, cold = nil, nil, 0
			mu.Unlock()
			_, err := g.api.CreatePool(context.Background(), &corralv1.CreatePoolRequest{Name: ttiPool, Size: int32(n),
				Spec: &corralv1.PoolSpec{Image: image}})
			if err != nil {
				return err
			}
			return g.waitPoolFull(ttiPool, n)
		},
		run: func(i int) (time.Duration, error) {
			d, claim, fromPool, err := g.claimInteractive(i)
			if err == nil {
				mu.Lock()
				totals, claims = append(totals, d), append(claims, claim)
				if !fromPool {
					cold++
				}
				mu.Unlock()
			}
			return d, err
		},
		figures: func(mode string) []*figure {
			mu.Lock()
			defer mu.Unlock()
			figs := []*figure{{Name: fmt.Sprintf("%s, %s: claims created cold", name, mode), Value: float64(cold), Unit: ""}}
			if len(totals) == 0 {
				return figs
			}
			mid := p50(totals)
			return append(figs,
				&figure{Name: fmt.Sprintf("%s, %s: p50", name, mode), Value: millis(mid), Unit: "ms", Goal: fmt.Sprintf("≤ %s", goal), Met: ptr(mid <= goal)},
				&figure{Name: fmt.Sprintf("%s, %s: claim alone p50", name, mode), Value: millis(p50(claims)), Unit: "ms"})
		},
		cleanup: func() error {
			if _, err := g.api.DeletePool(context.Background(), &corralv1.DeletePoolRequest{Name: ttiPool}); err != nil {
				return err
			}
			// The pool's members are being deleted meanwhile; one that goes
			// between the list and its delete fails that pass.
			return testenv.Until(time.Minute, g.removeAll)
		},
	}
}

// claimInteractive is interactive with the sandbox claimed from ttiPool;
// it also returns how long the claim alone took.
func (g *gateway) claimInteractive(i int) (total, claim time.Duration, fromPool bool, err error) {
	name := fmt.Sprintf("tti-%d", i)
	t0 := time.Now()
	resp, err := g.api.CreateSandbox(context.Background(), &corralv1.CreateSandboxRequest{Name: name, Pool: ttiPool})
	if err != nil {
		return 0, 0, false, err
	}
	claim = time.Since(t0)
	if resp.Sandbox.Phase != "ready" {
		if err := g.waitPhase(name, "ready"); err != nil {
			return 0, 0, false, err
		}
	}
	if err := g.echo(name); err != nil {
		return 0, 0, false, err
	}
	return time.Since(t0), claim, resp.FromPool, nil
}

// waitPoolFull waits until pool has n members, all ready.
func (g *gateway) waitPoolFull(pool string, n int) error {
	return testenv.Until(5*time.Minute, func() error {
		resp, err := g.api.ListPools(context.Background(), &corralv1.ListPoolsRequest{})
		if err != nil {
			return err
		}
		for _, p := range resp.Pools {
			if p.Name == pool && p.Ready == int32(n) && p.Members == int32(n) {
				return nil
			}
		}
		return fmt.Errorf("pool %s: not %d ready yet", pool, n)
	})
}

func p50(ds []time.Duration) time.Duration {
	return slices.Sorted(slices.Values(ds))[len(ds)/2]
}

func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
