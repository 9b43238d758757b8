package sandbox

import "time"

// SnapshotState is how far a snapshot has been taken.
type SnapshotState string

// The snapshot states. Only a ready snapshot is listed or used: one left
// creating by a gateway that died is removed when the next one starts.
const (
	SnapshotCreating SnapshotState = "creating"
	SnapshotReady    SnapshotState = "ready"
)

// Snapshot is a sandbox's /sandbox at one instant with what it was created
// with, kept by the gateway: new sandboxes are made from it.
type Snapshot struct {
	ID     string
	Tenant string
	Name   string
	State  SnapshotState
	// Source and SourceName are the sandbox it was taken of ("" for an
	// imported one).
	Source, SourceName string
	// Spec is the image, command, labels and policy new sandboxes get
	// unless their create says otherwise.
	Spec Spec
	// Manifest is the digest of its content's manifest in the snapshot
	// store, set once it is ready.
	Manifest string
	Files    int64
	Bytes    int64
	// Paused is the sandbox this snapshot paused for its copy, while it
	// is being taken: a gateway that dies meanwhile resumes it at start.
	Paused    string
	CreatedAt time.Time
}

// ValidateSnapshotName checks a snapshot's name, a DNS label.
func ValidateSnapshotName(name string) error { return validDNSLabel("snapshot", name, 63) }
