package sandbox

import "time"

// OpKind names what a journal entry records. Requests are the verbs a caller
// asked for; driver kinds are single attempts of a driver call.
type OpKind string

// The operation kinds.
const (
	OpCreate OpKind = "create"
	OpStart  OpKind = "start"
	OpStop   OpKind = "stop"
	OpDelete OpKind = "delete"
	OpUpdate OpKind = "update" // a new policy for a stopped sandbox
	// OpClaim records that a ready pool member became a caller's sandbox
	// (renamed and relabelled); it is settled when it is written.
	OpClaim OpKind = "claim"
	// OpPause and OpResume freeze every process of a sandbox and thaw them.
	OpPause  OpKind = "pause"
	OpResume OpKind = "resume"

	OpDriverCreate OpKind = "driver.create"
	OpDriverStart  OpKind = "driver.start"
	OpDriverStop   OpKind = "driver.stop"
	OpDriverDelete OpKind = "driver.delete"
	OpDriverPause  OpKind = "driver.pause"
	OpDriverResume OpKind = "driver.resume"
	// OpDriverSeed puts a snapshot's files in /sandbox before the first
	// start.
	OpDriverSeed OpKind = "driver.seed"
)

// IsRequest reports whether the kind is a caller's request, not a driver call.
func (k OpKind) IsRequest() bool {
	switch k {
	case OpCreate, OpStart, OpStop, OpDelete, OpUpdate, OpPause, OpResume:
		return true
	}
	return false
}

// OpState is the state of a journal entry. Everything but pending is settled.
type OpState string

// The operation states.
const (
	OpPending     OpState = "pending"
	OpSucceeded   OpState = "succeeded"
	OpFailed      OpState = "failed"
	OpTimedOut    OpState = "timed_out"
	OpInterrupted OpState = "interrupted"
	OpSuperseded  OpState = "superseded"
)

// Operation is one journal entry.
type Operation struct {
	ID         int64
	SandboxID  string
	Kind       OpKind
	State      OpState
	Owner      string // the gateway instance that wrote it
	Attempt    int
	Generation int64
	StartedAt  time.Time
	Deadline   time.Time // never zero
	FinishedAt time.Time // zero while pending
	Error      string
	Detail     string
	// Actor is who asked for a request: a caller's name, tenant and role.
	// Empty on the gateway's own entries.
	Actor string
	// Epoch is the store's lease's when Owner wrote it: it grows with
	// every replica that takes the lease over (0 on a store one gateway
	// holds by its home's lock).
	Epoch int64
}
