// Package store defines where the gateway keeps sandbox records and the
// operation journal. Implementations live in sub-packages.
package store

import (
	"context"
	"errors"
	"time"

	"github.com/corral-sandbox/corral/internal/sandbox"
)

// Store keeps sandbox records and their journals. Every method is one
// transaction; an intent change and its journal entry commit together.
type Store interface {
	// CreateSandbox inserts a record and its create request. When the
	// record's RequestID matches an existing record, that record is returned
	// with created=false and nothing is written. A taken name is
	// errdefs.ErrAlreadyExists.
	CreateSandbox(ctx context.Context, sb *sandbox.Sandbox, req *sandbox.Operation) (got *sandbox.Sandbox, created bool, err error)
	// GetSandbox returns the record with the given id.
	GetSandbox(ctx context.Context, id string) (*sandbox.Sandbox, error)
	// GetSandboxByName returns the record with the given name.
	GetSandboxByName(ctx context.Context, name string) (*sandbox.Sandbox, error)
	// ListSandboxes returns every record, oldest first.
	ListSandboxes(ctx context.Context) ([]*sandbox.Sandbox, error)
	// Mutate reads the record with the given id, lets fn change it and
	// writes it back with the journal changes fn returns, all in one
	// transaction. An error from fn rolls everything back.
	Mutate(ctx context.Context, id string, fn func(sb *sandbox.Sandbox) (Mutation, error)) (*sandbox.Sandbox, error)
	// MutateNamed is Mutate of the record named nameOrID, else of the one
	// with that id, as a caller names a sandbox: a request changes its
	// intent without reading it first.
	MutateNamed(ctx context.Context, nameOrID string, fn func(sb *sandbox.Sandbox) (Mutation, error)) (*sandbox.Sandbox, error)
	// DeleteSandbox removes a record and its journal.
	DeleteSandbox(ctx context.Context, id string) error

	// PutOperation inserts each op (when its ID is 0, setting it) or
	// updates it, all in one transaction.
	PutOperation(ctx context.Context, ops ...*sandbox.Operation) error
	// ListOperations returns the journal of one sandbox, oldest first.
	ListOperations(ctx context.Context, sandboxID string) ([]*sandbox.Operation, error)
	// SettlePending settles the pending entries that owners selects with
	// the given state, adding reason to their error, and returns how many it
	// settled.
	SettlePending(ctx context.Context, owners Owners, state sandbox.OpState, at time.Time, reason string) (int, error)

	// Identity is the store's identity, made with it and never changed:
	// the gateway that keeps its records in it puts it on its compute
	// objects.
	Identity(ctx context.Context) (string, error)

	// AddGatewayEvent journals something the gateway did that belongs to
	// no sandbox record, such as removing an orphaned compute object.
	AddGatewayEvent(ctx context.Context, ev GatewayEvent) error
	// ListGatewayEvents returns the gateway's own journal, oldest first.
	ListGatewayEvents(ctx context.Context) ([]GatewayEvent, error)

	// AddExposedPort records an exposed port of an existing sandbox
	// (errdefs.ErrNotFound when it does not exist). A port of the sandbox
	// already exposed, or an address already serving, is
	// errdefs.ErrAlreadyExists.
	AddExposedPort(ctx context.Context, p sandbox.ExposedPort) error
	// RemoveExposedPort removes a sandbox's exposed port;
	// errdefs.ErrNotFound when it is not exposed.
	RemoveExposedPort(ctx context.Context, sandboxID string, port int) error
	// ListExposedPorts returns the exposed ports of one sandbox, or of
	// every sandbox when sandboxID is "", oldest first.
	ListExposedPorts(ctx context.Context, sandboxID string) ([]sandbox.ExposedPort, error)

	// CreatePool inserts a pool; a taken name is errdefs.ErrAlreadyExists.
	CreatePool(ctx context.Context, p *sandbox.Pool) error
	// GetPool returns the pool with the given name (errdefs.ErrNotFound).
	GetPool(ctx context.Context, name string) (*sandbox.Pool, error)
	// ListPools returns every pool by name.
	ListPools(ctx context.Context) ([]*sandbox.Pool, error)
	// DeletePool removes a pool; its members are left to the caller.
	DeletePool(ctx context.Context, name string) error

	// CreateSecret inserts a secret (its value sealed); a taken name is
	// errdefs.ErrAlreadyExists.
	CreateSecret(ctx context.Context, s *sandbox.Secret) error
	// UpdateSecret replaces a secret's sealed value and fingerprint, and
	// its UpdatedAt (errdefs.ErrNotFound).
	UpdateSecret(ctx context.Context, s *sandbox.Secret) error
	// GetSecret returns the secret with the given name (errdefs.ErrNotFound).
	GetSecret(ctx context.Context, name string) (*sandbox.Secret, error)
	// ListSecrets returns every secret by name.
	ListSecrets(ctx context.Context) ([]*sandbox.Secret, error)
	// DeleteSecret removes a secret and its uses (errdefs.ErrNotFound).
	DeleteSecret(ctx context.Context, name string) error

	// AppendLedger keeps credential uses and egress denials in one write,
	// setting their Seq; each secret's uses and each sandbox's denials are
	// bounded, the oldest going first. A sandbox's denials go with its
	// record.
	AppendLedger(ctx context.Context, uses []sandbox.CredentialUse, denials []sandbox.EgressDecision) error
	// CredentialUses returns the newest limit uses of a secret whose Seq
	// is past after, oldest first.
	CredentialUses(ctx context.Context, secret string, after int64, limit int) ([]sandbox.CredentialUse, error)
	// EgressDenials returns the newest limit denials of sandbox id whose
	// Seq is past after, oldest first.
	EgressDenials(ctx context.Context, id string, after int64, limit int) ([]sandbox.EgressDecision, error)
	// ClaimSandbox turns the oldest ready member of a pool into the
	// caller's sandbox in one transaction: it is renamed, takes the
	// claim's request id and labels (its pool label goes) and gets c.Op,
	// settled, in its journal. No member of the pool is ready:
	// ErrNoneReady. A request id that created or claimed a sandbox already
	// returns that sandbox with claimed=false.
	ClaimSandbox(ctx context.Context, pool string, c Claim) (sb *sandbox.Sandbox, claimed bool, err error)

	// Close flushes and closes the store.
	Close() error
}

// Claim is what a claim of a pool member gives it.
type Claim struct {
	Name      string
	RequestID string
	Labels    map[string]string
	At        time.Time
	// Op is the claim's journal entry; its sandbox id is filled in.
	Op *sandbox.Operation
}

// ErrNoneReady is ClaimSandbox's answer when the pool has no ready member.
var ErrNoneReady = errors.New("no ready member")

// Mutation is what a Mutate callback adds to the journal.
type Mutation struct {
	// Request, when set, is inserted; pending requests it replaces are
	// settled as superseded.
	Request *sandbox.Operation
	// SettleRequests, when set, settles the pending requests with this state.
	SettleRequests sandbox.OpState
	// Put are driver calls' journal entries inserted or updated as
	// PutOperation does (such as the settled entry of the call before
	// this change); a request there is refused (it goes in Request).
	Put []*sandbox.Operation
}

// Owners selects journal entries by owner: those of instance Is when set,
// else those of every instance but IsNot.
type Owners struct {
	Is, IsNot string
}

// GatewayEvent is one entry of the gateway's own journal.
type GatewayEvent struct {
	At      time.Time
	Kind    string // e.g. orphan_found, orphan_removed
	Subject string // e.g. the sandbox id on the compute object
	Detail  string
}
