package docker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/moby/moby/client"

	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/policy"
)

// labelIsolation marks a container that runs on the gVisor tier.
const labelIsolation = "corral.isolation"

// gvisorHostPids is the host's cap on the processes and threads of a
// gVisor container whose sandbox may have pids processes. The host counts
// gVisor's own (its kernel's threads, and on the ptrace platform a stub
// per process: ~8 each, measured), and kills the whole sandbox when the
// cap is reached, so it is only the host's backstop: inside, the exec
// stage caps processes at pids with RLIMIT_NPROC, which fails a fork
// cleanly (EAGAIN).
func gvisorHostPids(pids int64) int64 { return 8*pids + 256 }

// gvisorRuntime is what the engine says of its gVisor runtime.
type gvisorRuntime struct {
	name string
	// hostNetwork: its runtimeArgs give the sandbox the container's network
	// namespace (--network=host), where only loopback and the egress proxy
	// are; otherwise gVisor's own stack has no way out at all.
	hostNetwork bool
}

// network says, for protections, what the sandbox's network is.
func (g gvisorRuntime) network() string {
	if g.hostNetwork {
		return "the host's stack in a loopback-only namespace"
	}
	return "gVisor's stack, loopback only"
}

// gvisorRuntime returns the engine's gVisor runtime (Options.GVisorRuntime).
// A runtime found is kept; a missing one is asked for again at the next
// call, so one added to the engine later is found without a restart.
func (d *Driver) gvisorRuntime(ctx context.Context) (gvisorRuntime, error) {
	d.mu.Lock()
	known := d.gvisor
	d.mu.Unlock()
	if known != nil {
		return *known, nil
	}
	res, err := d.api.Info(ctx, client.InfoOptions{})
	if err != nil {
		return gvisorRuntime{}, d.wrap(err, "info")
	}
	name := d.opts.GVisorRuntime
	rt, ok := res.Info.Runtimes[name]
	if !ok {
		return gvisorRuntime{}, errdefs.InvalidArgument("isolation: gvisor needs the engine's %q runtime, and the Docker engine at %s has only %s: "+
			`add "runtimes": {%q: {"path": "/usr/bin/runsc", "runtimeArgs": ["--network=host"]}} to its daemon.json and reload it (SIGHUP), or name another runtime with --docker-gvisor-runtime`,
			name, d.host, strings.Join(slices.Sorted(maps.Keys(res.Info.Runtimes)), ", "), name)
	}
	g := gvisorRuntime{name: name, hostNetwork: hostNetwork(rt.Args)}
	d.mu.Lock()
	d.gvisor = &g
	d.mu.Unlock()
	return g, nil
}

// hostNetwork tells whether runsc's arguments give it --network=host
// (also written -network=host, or as two arguments).
func hostNetwork(args []string) bool {
	network := "sandbox" // runsc's default
	for i, a := range args {
		flag, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if flag != "network" || !strings.HasPrefix(a, "-") {
			continue
		}
		if !hasValue && i+1 < len(args) {
			value = args[i+1]
		}
		network = value
	}
	return network == "host"
}

// checkGVisor refuses a gVisor spec the engine cannot run: no such
// runtime, or network_policies where the runtime gives the sandbox no way
// to the egress proxy. An engine that does not answer is not a refusal:
// the create that follows fails, and is retried, with the reason.
func (d *Driver) checkGVisor(spec driver.Spec) error {
	if !spec.Policy.GVisor() {
		return nil
	}
	switch p := spec.Policy; {
	case p.Filesystem.Set && p.Landlock.Compatibility == policy.HardRequirement:
		return errdefs.InvalidArgument("sandbox %s: gVisor has no Landlock, so filesystem_policy with landlock compatibility hard_requirement cannot hold on the gVisor tier: "+
			"use best_effort (the lists are then not enforced; the root stays read-only, /sandbox and /tmp writable) or isolation: namespaces", spec.Name)
	case p.Filesystem.Set && !p.Landlock.Given:
		return errdefs.InvalidArgument("sandbox %s: gVisor has no Landlock, so on the Docker driver's gVisor tier filesystem_policy is not enforced: "+
			"say landlock: {compatibility: best_effort} to run without it (the root stays read-only, /sandbox and /tmp writable), "+
			"or use isolation: namespaces, or the native driver's gVisor tier, which enforces the lists with its mounts", spec.Name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	g, err := d.gvisorRuntime(ctx)
	switch {
	case errors.Is(err, errdefs.ErrInvalidArgument):
		return err
	case err != nil:
		return nil
	case len(spec.Policy.Network) > 0 && !g.hostNetwork:
		return errdefs.InvalidArgument("sandbox %s: network_policies on the gVisor tier need the engine's %q runtime to run with --network=host "+
			"(the container's namespace has only loopback: the sandbox reaches the egress proxy and nothing else); without it gVisor's own stack has no way out", spec.Name, g.name)
	}
	return nil
}

// gvisorProtections is what the gVisor tier adds to a container's
// protections.
func (d *Driver) gvisorProtections(ctx context.Context) string {
	g, err := d.gvisorRuntime(ctx)
	if err != nil {
		return "gVisor (runtime " + d.opts.GVisorRuntime + ")"
	}
	return fmt.Sprintf("gVisor (runtime %s; network: %s)", g.name, g.network())
}

var _ driver.Tierer = (*Driver)(nil)

// Tiers implements driver.Tierer.
func (d *Driver) Tiers(ctx context.Context) []driver.Tier {
	tiers := []driver.Tier{{Name: policy.IsolationNamespaces, Available: true, Detail: "containers of the engine's default runtime"}}
	g, err := d.gvisorRuntime(ctx)
	if err != nil {
		return append(tiers, driver.Tier{Name: policy.IsolationGVisor, Detail: err.Error()})
	}
	detail := fmt.Sprintf("the engine's %q runtime; network: %s", g.name, g.network())
	if !g.hostNetwork {
		detail += " (network_policies refused: give the runtime --network=host)"
	}
	return append(tiers, driver.Tier{Name: policy.IsolationGVisor, Available: true, Detail: detail})
}
