package lifecycle

import (
	"context"

	"github.com/corral-sandbox/corral/internal/caller"
	"github.com/corral-sandbox/corral/internal/policy"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

// scope is the tenant whose records the caller of ctx sees, "" for every
// one.
func scope(ctx context.Context) string { return caller.From(ctx).Scope() }

// askedBy is who a request entry says asked: the caller a front end
// identified, or "" for the gateway's own work.
func askedBy(ctx context.Context) string {
	if !caller.Identified(ctx) {
		return ""
	}
	return caller.From(ctx).String()
}

// resources are what a sandbox with policy pol holds against its
// tenant's quota: its limits (the store gives the defaults where the quota
// bounds what they leave unlimited).
func resources(pol policy.Policy) sandbox.Resources {
	return sandbox.Resources{MemoryBytes: pol.Limits.MemoryBytes, CPUMillis: pol.Limits.CPUMillis, DiskBytes: pol.Limits.DiskBytes}
}

// withHeld fills in the limits a policy leaves unset from what its sandbox
// is counted at.
func withHeld(pol policy.Policy, held sandbox.Resources) policy.Policy {
	if pol.Limits.MemoryBytes == 0 {
		pol.Limits.MemoryBytes = held.MemoryBytes
	}
	if pol.Limits.CPUMillis == 0 {
		pol.Limits.CPUMillis = held.CPUMillis
	}
	return pol
}
