package sandbox

import "time"

// Replica is one gateway of a store that several share, as it says of
// itself every second.
type Replica struct {
	// ID is the gateway's instance.
	ID   string
	PID  int
	Host string
	Home string
	// Listen is its TLS address, "" when it serves none.
	Listen    string
	StartedAt time.Time
	SeenAt    time.Time
	// Leader: it holds the store's lease, taken at Since with the fencing
	// token Epoch, and so owns every sandbox of the store.
	Leader bool
	Epoch  int64
	Since  time.Time
	// Sandboxes is how many sandboxes it owns (the gateway counts them).
	Sandboxes int
}
