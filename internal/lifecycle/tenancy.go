package lifecycle

import (
	"context"

	"github.com/corral-sandbox/corral/internal/caller"
	"github.com/corral-sandbox/corral/internal/policy"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

// What a sandbox whose policy sets no limit on memory or CPUs gets, and is
// counted at, in a tenant whose quota bounds that resource.
const (
	DefaultMemoryBytes = 1 << 30
	DefaultCPUMillis   = 1000
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

// resources are what a sandbox of tenant with policy pol holds against
// the tenant's quota: its limits, or the defaults where it sets none and
// the quota bounds the resource (the driver then enforces them).
func (m *Manager) resources(ctx context.Context, tenant string, pol policy.Policy) (sandbox.Resources, error) {
	r := sandbox.Resources{MemoryBytes: pol.Limits.MemoryBytes, CPUMillis: pol.Limits.CPUMillis, DiskBytes: pol.Limits.DiskBytes}
	if r.MemoryBytes > 0 && r.CPUMillis > 0 {
		return r, nil
	}
	t, _, err := m.cfg.Store.GetTenant(ctx, tenant)
	if err != nil {
		return r, err
	}
	if r.MemoryBytes == 0 && t.Quota.MemoryBytes > 0 {
		r.MemoryBytes = DefaultMemoryBytes
	}
	if r.CPUMillis == 0 && t.Quota.CPUMillis > 0 {
		r.CPUMillis = DefaultCPUMillis
	}
	return r, nil
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
