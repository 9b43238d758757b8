package sandbox

import (
	"time"

	"github.com/corral-sandbox/corral/internal/errdefs"
)

// LabelPool is the label that marks an unclaimed member of a warm pool; its
// value is the pool's name. A claim removes it.
const LabelPool = "corral.pool"

// MaxPoolSize bounds a pool's size.
const MaxPoolSize = 256

// maxPoolName leaves room for the suffix of a member's name
// ("NAME-" and 8 hex digits) within a sandbox name's 63 characters.
const maxPoolName = 63 - 9

// Pool is a warm pool: size members of one fixed spec, kept ready to be
// claimed.
type Pool struct {
	Name      string
	Tenant    string
	Size      int
	Spec      Spec // image, command and policy; fixed at create
	CreatedAt time.Time
}

// Validate checks a pool's name and size.
func (p *Pool) Validate() error {
	if err := validDNSLabel("pool", p.Name, maxPoolName); err != nil {
		return err
	}
	if p.Size < 1 || p.Size > MaxPoolSize {
		return errdefs.InvalidArgument("invalid pool size %d: want 1 to %d", p.Size, MaxPoolSize)
	}
	return nil
}

// MemberName is a new generated name for a member of the pool.
func (p *Pool) MemberName() string { return p.Name + "-" + NewID()[:8] }

// PoolOf returns the pool a record is an unclaimed member of, or "".
func (s *Sandbox) PoolOf() string { return s.Spec.Labels[LabelPool] }
