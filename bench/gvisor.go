package main

import (
	"fmt"
	"time"
)

// The isolation tiers' bench: create→ready and time to interactive of a
// sandbox on Docker's gVisor tier, beside the engine's runsc runtime
// called directly, the namespaces tier, runc called directly, and the
// native driver's two tiers. The ratio to the namespaces tier is the
// gVisor tier's overhead.

// gvisorOps are what each run measures.
var gvisorOps = []string{"create→ready", "time to interactive"}

// The subjects, the first being the table's corral column.
const (
	corralGVisor     = "corral gvisor"
	dockerRunsc      = "docker run --runtime=runsc"
	corralNamespaces = "corral namespaces"
	dockerRunc       = "docker run"
	nativeGVisor     = "corral native gvisor"
	nativeNamespaces = "corral native namespaces"
)

// gvisorRuntime is the engine's runsc runtime (.ci/run names it so).
const gvisorRuntime = "runsc"

func benchGVisor(bin, home string, n, warmup int) (*table, error) {
	g, api, err := dockerPair(bin, home)
	if err != nil {
		return nil, err
	}
	defer g.close()
	defer api.Close()
	defer removeTTIContainers(api)
	native, err := startGateway(bin, home+"-native", "--driver", "native")
	if err != nil {
		return nil, err
	}
	defer native.close()

	t := newTable("isolation tiers: gVisor beside namespaces, create→ready and create → first exec echo (corral: Docker's gVisor tier)", gvisorOps,
		[]string{dockerRunsc, corralNamespaces, dockerRunc, nativeGVisor, nativeNamespaces})
	subjects := []struct {
		name string
		run  func(i int) (time.Duration, time.Duration, error)
	}{
		{corralGVisor, func(i int) (time.Duration, time.Duration, error) {
			return g.readyEchoRemove(fmt.Sprintf("gvisor-%d", i), "version: 1\nisolation: gvisor\n")
		}},
		{dockerRunsc, func(i int) (time.Duration, time.Duration, error) {
			return dockerRunExec(api, fmt.Sprintf("corral-bench-runsc-%d", i), gvisorRuntime)
		}},
		{corralNamespaces, func(i int) (time.Duration, time.Duration, error) {
			return g.readyEchoRemove(fmt.Sprintf("namespaces-%d", i), "")
		}},
		{dockerRunc, func(i int) (time.Duration, time.Duration, error) {
			return dockerRunExec(api, fmt.Sprintf("corral-bench-runc-%d", i), "")
		}},
		{nativeGVisor, func(i int) (time.Duration, time.Duration, error) {
			return native.readyEchoRemove(fmt.Sprintf("gvisor-%d", i), "version: 1\nisolation: gvisor\n")
		}},
		{nativeNamespaces, func(i int) (time.Duration, time.Duration, error) {
			return native.readyEchoRemove(fmt.Sprintf("namespaces-%d", i), "")
		}},
	}
	for i := range n + warmup {
		for _, s := range subjects {
			ready, interactive, err := s.run(i)
			if err != nil {
				return nil, fmt.Errorf("%s, run %d: %w", s.name, i, err)
			}
			if err := removeTTIContainers(api); err != nil {
				return nil, err
			}
			if i < warmup {
				continue
			}
			who := s.name
			if who == corralGVisor {
				who = "corral"
			}
			t.add(gvisorOps[0], who, ready)
			t.add(gvisorOps[1], who, interactive)
		}
	}
	return t, nil
}

// readyEchoRemove is readyEcho, then the sandbox is deleted (untimed).
func (g *gateway) readyEchoRemove(name, policy string) (time.Duration, time.Duration, error) {
	ready, interactive, err := g.readyEcho(name, policy)
	if err == nil {
		_, err = g.timed(name, "", func() error { return g.remove(name) })
	}
	return ready, interactive, err
}

// gvisorOverhead is, for each operation, the gVisor tier's p50 over the
// namespaces tier's, and the engine's own: runsc's over runc's.
func gvisorOverhead(t *table) []*figure {
	var figs []*figure
	for _, op := range gvisorOps {
		times := t.Times[op]
		ratio := func(a, b string) float64 {
			return float64(stats(times[a])[0]) / float64(stats(times[b])[0])
		}
		figs = append(figs,
			&figure{Name: op + ": corral docker gvisor / corral docker namespaces", Value: ratio("corral", corralNamespaces), Unit: "×"},
			&figure{Name: op + ": corral native gvisor / corral native namespaces", Value: ratio(nativeGVisor, nativeNamespaces), Unit: "×"},
			&figure{Name: op + ": docker runsc / docker runc (the engine's own)", Value: ratio(dockerRunsc, dockerRunc), Unit: "×"})
	}
	return figs
}
