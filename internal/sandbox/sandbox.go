// Package sandbox defines the records the gateway keeps: sandboxes with
// their intent and observed phase, and the operation journal.
package sandbox

import (
	"crypto/rand"
	"encoding/hex"
	"regexp"
	"time"

	"github.com/corral-sandbox/corral/internal/errdefs"
)

// DesiredState is the intent a caller set for a sandbox.
type DesiredState string

// The desired states.
const (
	DesiredRunning DesiredState = "running"
	DesiredStopped DesiredState = "stopped"
	DesiredDeleted DesiredState = "deleted"
	// DesiredPaused: every process frozen, its memory kept.
	DesiredPaused DesiredState = "paused"
)

// Phase is what the reconciler last observed of a sandbox.
type Phase string

// The phases.
const (
	PhaseProvisioning Phase = "provisioning"
	PhaseReady        Phase = "ready"
	PhaseStopping     Phase = "stopping"
	PhaseStopped      Phase = "stopped"
	PhaseStarting     Phase = "starting"
	PhaseDeleting     Phase = "deleting"
	PhaseError        Phase = "error"
	// PhaseExited: the main process ended and the restart policy does not
	// (or no longer) restart it.
	PhaseExited Phase = "exited"
	// PhasePausing and PhasePaused: every process of the sandbox is being
	// frozen, or is frozen with its memory kept.
	PhasePausing Phase = "pausing"
	PhasePaused  Phase = "paused"
)

// Phases are the phases above, every one a sandbox can be in.
var Phases = []Phase{PhaseProvisioning, PhaseReady, PhaseStopping, PhaseStopped, PhaseStarting, PhaseDeleting, PhaseError, PhaseExited,
	PhasePausing, PhasePaused}

// The restart policies, applied by the gateway when a main process exits.
const (
	RestartNever     = "never"
	RestartOnFailure = "on_failure"
	RestartAlways    = "always"
)

// DefaultMaxRestarts caps restarts when a spec sets no cap.
const DefaultMaxRestarts = 5

// Spec is what a sandbox was created with.
type Spec struct {
	Image   string            `json:"image,omitempty"`
	Command []string          `json:"command,omitempty"`
	Labels  map[string]string `json:"labels,omitempty"`
	Policy  string            `json:"policy,omitempty"`
	// RestartPolicy is never, on_failure (the default) or always.
	RestartPolicy string `json:"restart_policy,omitempty"`
	// MaxRestarts caps restarts since the last start request.
	MaxRestarts int `json:"max_restarts,omitempty"`
	// Hosts pin names for the egress proxy: "NAME:IP" (--add-host).
	Hosts []string `json:"hosts,omitempty"`
	// Seed is the manifest of the snapshot (SeedFrom names it) whose files
	// fill /sandbox before the first start; cleared once they are in.
	Seed     string `json:"seed,omitempty"`
	SeedFrom string `json:"seed_from,omitempty"`
	// Memory is the digest of a memory image (a snapshot taken with
	// --memory): with Seed, the first start restores its processes
	// instead of running the command; cleared with Seed. On a snapshot,
	// its own memory image.
	Memory string `json:"memory,omitempty"`
}

// ValidateRestart checks and fills in the restart policy of a spec.
func (s *Spec) ValidateRestart() error {
	switch s.RestartPolicy {
	case "":
		s.RestartPolicy = RestartOnFailure
	case RestartNever, RestartOnFailure, RestartAlways:
	default:
		return errdefs.InvalidArgument("invalid restart policy %q: want never, on_failure or always", s.RestartPolicy)
	}
	if s.MaxRestarts < 0 {
		return errdefs.InvalidArgument("invalid max restarts %d: want 0 or more", s.MaxRestarts)
	}
	if s.MaxRestarts == 0 {
		s.MaxRestarts = DefaultMaxRestarts
	}
	return nil
}

// ShouldRestart reports whether a main process that exited with code is
// restarted under the spec's policy.
func (s *Spec) ShouldRestart(code int) bool {
	switch s.RestartPolicy {
	case RestartAlways:
		return true
	case RestartNever:
		return false
	}
	return code != 0
}

// Sandbox is one sandbox record.
type Sandbox struct {
	ID   string
	Name string
	// Tenant owns it; its name is unique within the tenant.
	Tenant    string
	RequestID string
	Spec      Spec
	Desired   DesiredState
	Phase     Phase
	// Generation is the incarnation the intent refers to; it grows when a
	// stopped sandbox is asked to run again.
	Generation int64
	Reason     string
	// ExitCode is the main process's last exit status, if it exited.
	ExitCode *int
	// Restarts counts restarts by the restart policy since the last start.
	Restarts  int
	CreatedAt time.Time
	UpdatedAt time.Time
	// Deadline is when the current intent must be reached. Always set.
	Deadline time.Time
	// Revision grows on every write of the record.
	Revision int64
	// LastRequest is the newest request entry of the journal, when loaded.
	LastRequest *Operation
	// Resources are what it counts at against its tenant's quota.
	Resources Resources
	// PauseMemory says, while it is paused, that the pause checkpoints its
	// processes and memory out and frees the memory (pause --memory),
	// rather than freezing them in place.
	PauseMemory bool
}

// Converged reports whether the observed phase matches the intent.
func (s *Sandbox) Converged() bool {
	switch s.Desired {
	case DesiredRunning:
		return s.Phase == PhaseReady || s.Phase == PhaseExited
	case DesiredStopped:
		return s.Phase == PhaseStopped
	case DesiredPaused:
		return s.Phase == PhasePaused
	}
	return false
}

var nameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`)

// ValidateName checks that a name is a DNS label: 1 to 63 lower-case
// letters, digits and dashes, starting and ending with a letter or digit.
func ValidateName(name string) error {
	switch {
	case name == "":
		return errdefs.InvalidArgument("sandbox name is empty: give one with --name")
	case len(name) > 63:
		return errdefs.InvalidArgument("invalid sandbox name %q: longer than 63 characters", name)
	case !nameRE.MatchString(name):
		return errdefs.InvalidArgument("invalid sandbox name %q: use lower-case letters, digits and '-', starting and ending with a letter or digit", name)
	}
	return nil
}

// NewID returns a new random sandbox id (32 hex digits).
func NewID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// ShortID is the first 12 digits of an id, as shown to people.
func ShortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
