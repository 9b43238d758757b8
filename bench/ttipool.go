package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
	"github.com/corral-sandbox/corral/internal/testenv"
)

// ttiPool is the warm pool the pool subjects claim from.
const ttiPool = "tti"

// poolSubject is time to interactive with a claim from a warm pool of n,
// made and filled before each mode is timed (untimed), and deleted after.
func poolSubject(name string, g *gateway, image string) ttiSubject {
	var cold atomic.Int64
	return ttiSubject{
		name: name,
		prepare: func(n int) error {
			cold.Store(0)
			_, err := g.api.CreatePool(context.Background(), &corralv1.CreatePoolRequest{Name: ttiPool, Size: int32(n),
				Spec: &corralv1.PoolSpec{Image: image}})
			if err != nil {
				return err
			}
			return g.waitPoolFull(ttiPool, n)
		},
		run: func(i int) (time.Duration, error) {
			d, fromPool, err := g.claimInteractive(i)
			if err == nil && !fromPool {
				cold.Add(1)
			}
			return d, err
		},
		cleanup: func() error {
			if n := cold.Load(); n > 0 {
				fmt.Printf("  %s: %d claims found the pool empty and were created cold\n", name, n)
			}
			if _, err := g.api.DeletePool(context.Background(), &corralv1.DeletePoolRequest{Name: ttiPool}); err != nil {
				return err
			}
			return g.removeAll()
		},
	}
}

// claimInteractive is interactive with the sandbox claimed from ttiPool.
func (g *gateway) claimInteractive(i int) (time.Duration, bool, error) {
	name := fmt.Sprintf("tti-%d", i)
	t0 := time.Now()
	resp, err := g.api.CreateSandbox(context.Background(), &corralv1.CreateSandboxRequest{Name: name, Pool: ttiPool})
	if err != nil {
		return 0, false, err
	}
	if resp.Sandbox.Phase != "ready" {
		if err := g.waitPhase(name, "ready"); err != nil {
			return 0, false, err
		}
	}
	if err := g.echo(name); err != nil {
		return 0, false, err
	}
	return time.Since(t0), resp.FromPool, nil
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
