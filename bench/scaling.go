package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/moby/moby/client"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
	"github.com/corral-sandbox/corral/internal/testenv"
)

// scalingClients is how many clients create at once for the throughput
// figure.
const scalingClients = 8

// benchScaling measures, per driver, how create→ready latency and create
// throughput change with the number of sandboxes already running: 1, 10
// and 100 (1 and 10 with -quick); and what each live sandbox costs the
// gateway in threads, descriptors and RSS, from the smallest fleet to the
// largest.
func benchScaling(bin, dir string, drivers []string, runs int, quick bool) ([]*figure, error) {
	fleets := []int{1, 10, 100}
	if quick {
		fleets = []int{1, 10}
	}
	var figs []*figure
	for _, drv := range drivers {
		args := []string{"--driver", drv}
		if drv == "docker" {
			args = append(args, "--image-pull-policy", "never", "--default-image", testenv.TestImage)
		}
		g, err := startGateway(bin, filepath.Join(dir, drv), args...)
		if err != nil {
			return nil, err
		}
		live := 0
		var first gatewayCost
		for i, fleet := range fleets {
			for ; live < fleet; live++ {
				if _, err := g.create(fmt.Sprintf("live-%d", live), &corralv1.SandboxSpec{Command: nativeCommand}); err != nil {
					g.close()
					return nil, err
				}
			}
			cost := costOf(g.cmd.Process.Pid)
			switch i {
			case 0:
				first = cost
			case len(fleets) - 1:
				per := float64(fleet - fleets[0])
				figs = append(figs,
					&figure{Name: fmt.Sprintf("%s: gateway threads per live sandbox (%d→%d live)", drv, fleets[0], fleet), Value: float64(cost.threads-first.threads) / per, Unit: "threads"},
					&figure{Name: fmt.Sprintf("%s: gateway descriptors per live sandbox (%d→%d live)", drv, fleets[0], fleet), Value: float64(cost.files-first.files) / per, Unit: "fds"},
					&figure{Name: fmt.Sprintf("%s: gateway RSS per live sandbox (%d→%d live)", drv, fleets[0], fleet), Value: (cost.rssMB - first.rssMB) * 1024 / per, Unit: "KiB"})
			}
			lat, rate, err := scalingAt(g, fleet, runs)
			if err != nil {
				g.close()
				return nil, fmt.Errorf("%s with %d live sandboxes: %w", drv, fleet, err)
			}
			figs = append(figs,
				&figure{Name: fmt.Sprintf("%s: create→ready p50, %d live sandboxes", drv, fleet), Value: float64(lat.Microseconds()) / 1000, Unit: "ms"},
				&figure{Name: fmt.Sprintf("%s: creates to ready per second (%d clients), %d live sandboxes", drv, scalingClients, fleet), Value: rate, Unit: "/s"})
		}
		err = g.removeAll()
		g.close()
		if err != nil {
			return nil, err
		}
		if drv == "docker" {
			rate, err := engineRate()
			if err != nil {
				return nil, fmt.Errorf("docker engine direct: %w", err)
			}
			figs = append(figs, &figure{Name: fmt.Sprintf("docker: engine API direct, creates to running per second (%d clients)", scalingClients), Value: rate, Unit: "/s"})
		}
	}
	return figs, nil
}

// engineRate is the Docker peer of scalingAt's throughput: scalingClients×2
// create+start calls to the Engine API, scalingClients at a time, with no
// gateway between: what the engine itself allows here.
func engineRate() (float64, error) {
	api, err := client.New(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return 0, err
	}
	defer api.Close()
	defer removeTTIContainers(api)
	n := scalingClients * 2
	errs := make(chan error, n)
	var wg sync.WaitGroup
	t0 := time.Now()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := directRun(context.Background(), api, fmt.Sprintf("corral-bench-rate-%d", i))
			errs <- err
		}()
		if (i+1)%scalingClients == 0 {
			wg.Wait()
		}
	}
	wg.Wait()
	rate := float64(n) / time.Since(t0).Seconds()
	close(errs)
	for err := range errs {
		if err != nil {
			return 0, err
		}
	}
	return rate, nil
}

// scalingAt times runs creates one by one (p50 of create→ready), then
// scalingClients×2 concurrent ones until all are ready; every sandbox made
// here is deleted again, so the fleet stays as it was.
func scalingAt(g *gateway, fleet, runs int) (time.Duration, float64, error) {
	var lat []time.Duration
	for i := range runs {
		name := fmt.Sprintf("probe-%d-%d", fleet, i)
		d, err := g.create(name, &corralv1.SandboxSpec{Command: nativeCommand})
		if err != nil {
			return 0, 0, err
		}
		lat = append(lat, d)
		if _, err := g.timed(name, "", func() error { return g.remove(name) }); err != nil {
			return 0, 0, err
		}
	}
	n := scalingClients * 2
	var wg sync.WaitGroup
	errs := make(chan error, n)
	t0 := time.Now()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := g.create(fmt.Sprintf("burst-%d-%d", fleet, i), &corralv1.SandboxSpec{Command: nativeCommand})
			errs <- err
		}()
		if (i+1)%scalingClients == 0 {
			wg.Wait() // scalingClients at a time
		}
	}
	wg.Wait()
	rate := float64(n) / time.Since(t0).Seconds()
	close(errs)
	for err := range errs {
		if err != nil {
			return 0, 0, err
		}
	}
	for i := range n {
		name := fmt.Sprintf("burst-%d-%d", fleet, i)
		if _, err := g.timed(name, "", func() error { return g.remove(name) }); err != nil {
			return 0, 0, err
		}
	}
	return stats(lat)[0], rate, nil
}

// removeAll deletes every sandbox of the gateway and waits until they are
// gone.
func (g *gateway) removeAll() error {
	ctx := context.Background()
	resp, err := g.api.ListSandboxes(ctx, &corralv1.ListSandboxesRequest{})
	if err != nil {
		return err
	}
	for _, sb := range resp.Sandboxes {
		_, err := g.timed(sb.Name, "", func() error { return g.remove(sb.Name) })
		if status.Code(err) == codes.NotFound {
			continue // gone since the list (a pool's member its pool's delete removed)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// gatewayCost is what a gateway process holds.
type gatewayCost struct {
	threads, files int
	rssMB          float64
}

func costOf(pid int) gatewayCost {
	count := func(dir string) int {
		ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/%s", pid, dir))
		return len(ents)
	}
	return gatewayCost{threads: count("task"), files: count("fd"), rssMB: rssMB(pid)}
}
