package kubernetes

import (
	"github.com/corral-sandbox/corral/internal/policy"
)

// Unenforced says what of p the kubernetes driver does not enforce, or
// refuses, each with why; nil when it enforces all of it.
func Unenforced(p policy.Policy) []string {
	var out []string
	if len(p.Network) > 0 || len(p.Credentials) > 0 {
		out = append(out, "network_policies and credentials: only with [drivers.kubernetes] egress_listen, where the gateway serves its egress proxy to the cluster (without it they are refused, and a NetworkPolicy denies all egress)")
	}
	if p.Limits.Pids > 0 {
		out = append(out, "limits.pids: the kubelet's own pod pids limit applies, not the policy's")
	}
	if p.Lifecycle.MemorySnapshots {
		out = append(out, "lifecycle.memory_snapshots: no pause or snapshots on Kubernetes yet")
	}
	if p.Lifecycle.IdleTimeout > 0 && p.Lifecycle.OnIdle != policy.OnStop && p.Lifecycle.OnIdle != policy.OnDelete {
		out = append(out, "lifecycle.on_idle: pause: no pause on Kubernetes yet")
	}
	if p.GVisor() {
		out = append(out, "isolation gvisor: only with [drivers.kubernetes] gvisor_runtime_class, the cluster's RuntimeClass of runsc")
	}
	return out
}
