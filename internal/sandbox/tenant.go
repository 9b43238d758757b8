package sandbox

import (
	"fmt"
	"time"
)

// Tenant is who owns sandboxes, pools, secrets and exposed ports: names
// are unique within a tenant, and a caller of one tenant sees no other's.
type Tenant struct {
	Name      string
	Quota     Quota
	CreatedAt time.Time
	UpdatedAt time.Time
}

// ValidateTenantName checks a tenant's name: a DNS label, as a sandbox's.
func ValidateTenantName(name string) error {
	return validDNSLabel("tenant", name, 63)
}

// Quota bounds what a tenant's sandboxes hold together (pool members
// included); a zero field is no bound.
type Quota struct {
	Sandboxes int
	Resources
	// SnapshotBytes bounds what the tenant's snapshots' files hold
	// together (counted whole, whatever they share).
	SnapshotBytes int64
}

// Resources are what one sandbox is counted at against its tenant's quota:
// its policy's limits, or, where it sets none and the tenant bounds that
// resource, the defaults the gateway then applies to it.
type Resources struct {
	MemoryBytes int64
	CPUMillis   int64
	DiskBytes   int64
}

// What a sandbox whose policy sets no limit on memory or CPUs gets, and is
// counted at, in a tenant whose quota bounds that resource.
const (
	DefaultMemoryBytes = 1 << 30
	DefaultCPUMillis   = 1000
)

// Within is r with the defaults filled in where q bounds a resource r
// leaves unlimited.
func (r Resources) Within(q Quota) Resources {
	if r.MemoryBytes == 0 && q.MemoryBytes > 0 {
		r.MemoryBytes = DefaultMemoryBytes
	}
	if r.CPUMillis == 0 && q.CPUMillis > 0 {
		r.CPUMillis = DefaultCPUMillis
	}
	return r
}

// Usage is what a tenant's sandboxes hold.
type Usage struct {
	Sandboxes int
	Resources
	SnapshotBytes int64 // of its ready snapshots
}

// Exceeds names the first bound of q that u goes past, or "".
func (u Usage) Exceeds(q Quota) string {
	switch {
	case q.Sandboxes > 0 && u.Sandboxes > q.Sandboxes:
		return fmt.Sprintf("%d sandboxes", q.Sandboxes)
	case q.MemoryBytes > 0 && u.MemoryBytes > q.MemoryBytes:
		return fmt.Sprintf("%s of memory", FormatBytes(q.MemoryBytes))
	case q.CPUMillis > 0 && u.CPUMillis > q.CPUMillis:
		return fmt.Sprintf("%s CPUs", FormatCPUs(q.CPUMillis))
	case q.DiskBytes > 0 && u.DiskBytes > q.DiskBytes:
		return fmt.Sprintf("%s of disk", FormatBytes(q.DiskBytes))
	case q.SnapshotBytes > 0 && u.SnapshotBytes > q.SnapshotBytes:
		return fmt.Sprintf("%s of snapshots", FormatBytes(q.SnapshotBytes))
	}
	return ""
}

// FormatBytes writes a size as a quota or a limit is given: "8Gi", "512Mi",
// or a number of bytes.
func FormatBytes(n int64) string {
	for _, u := range []struct {
		suffix string
		size   int64
	}{{"Ti", 1 << 40}, {"Gi", 1 << 30}, {"Mi", 1 << 20}, {"Ki", 1 << 10}} {
		if n >= u.size && n%u.size == 0 {
			return fmt.Sprintf("%d%s", n/u.size, u.suffix)
		}
	}
	return fmt.Sprintf("%d", n)
}

// FormatCPUs writes thousandths of a CPU as a number of CPUs: "1.5".
func FormatCPUs(millis int64) string {
	if millis%1000 == 0 {
		return fmt.Sprintf("%d", millis/1000)
	}
	return fmt.Sprintf("%g", float64(millis)/1000)
}

// Token is a bearer token of the API, kept by its hash only: the token
// itself is shown once, when it is made.
type Token struct {
	// ID is the start of the token's hash, as people name it.
	ID        string
	Name      string
	Tenant    string
	Role      string
	Hash      []byte // SHA-256 of the token
	CreatedAt time.Time
	ExpiresAt time.Time
	RevokedAt time.Time // zero while valid
}

// ValidateTokenName checks a token's name: a DNS label.
func ValidateTokenName(name string) error {
	return validDNSLabel("token", name, 63)
}
