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
	// CreateSandbox inserts a record and its create request, in the
	// record's tenant, which must exist. When the record's RequestID
	// matches an existing record of the tenant, that record is returned
	// with created=false and nothing is written. A name taken in the
	// tenant is errdefs.ErrAlreadyExists; a record that would take the
	// tenant's sandboxes past its quota is errdefs.ErrResourceExhausted,
	// decided in the same transaction as the insert. Where the quota bounds
	// a resource the record's Resources leave unlimited, they take the
	// default (sandbox.Resources.Within).
	CreateSandbox(ctx context.Context, sb *sandbox.Sandbox, req *sandbox.Operation) (got *sandbox.Sandbox, created bool, err error)
	// GetSandbox returns the record with the given id.
	GetSandbox(ctx context.Context, id string) (*sandbox.Sandbox, error)
	// GetSandboxByName returns the record of tenant with the given name;
	// tenant "" looks in every tenant, and a name more than one has is
	// errdefs.ErrFailedPrecondition.
	GetSandboxByName(ctx context.Context, tenant, name string) (*sandbox.Sandbox, error)
	// ListSandboxes returns the records of tenant ("" for every one),
	// oldest first.
	ListSandboxes(ctx context.Context, tenant string) ([]*sandbox.Sandbox, error)
	// Mutate reads the record with the given id, lets fn change it and
	// writes it back with the journal changes fn returns, all in one
	// transaction. An error from fn rolls everything back.
	Mutate(ctx context.Context, id string, fn func(sb *sandbox.Sandbox) (Mutation, error)) (*sandbox.Sandbox, error)
	// MutateNamed is Mutate of the record of tenant named nameOrID, else
	// of the one of tenant with that id, as a caller names a sandbox
	// (tenant "" as GetSandboxByName): a request changes its intent
	// without reading it first. A change of the record's Resources that
	// would take its tenant past its quota is errdefs.ErrResourceExhausted.
	MutateNamed(ctx context.Context, tenant, nameOrID string, fn func(sb *sandbox.Sandbox) (Mutation, error)) (*sandbox.Sandbox, error)
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

	// CreatePool inserts a pool in its tenant; a name taken there is
	// errdefs.ErrAlreadyExists.
	CreatePool(ctx context.Context, p *sandbox.Pool) error
	// GetPool returns the pool of tenant with the given name
	// (errdefs.ErrNotFound).
	GetPool(ctx context.Context, tenant, name string) (*sandbox.Pool, error)
	// ListPools returns the pools of tenant ("" for every one) by name.
	ListPools(ctx context.Context, tenant string) ([]*sandbox.Pool, error)
	// DeletePool removes a pool; its members are left to the caller.
	DeletePool(ctx context.Context, tenant, name string) error

	// CreateSecret inserts a secret (its value sealed) in its tenant; a
	// name taken there is errdefs.ErrAlreadyExists.
	CreateSecret(ctx context.Context, s *sandbox.Secret) error
	// UpdateSecret replaces a secret's sealed value and fingerprint, and
	// its UpdatedAt (errdefs.ErrNotFound).
	UpdateSecret(ctx context.Context, s *sandbox.Secret) error
	// GetSecret returns the secret of tenant with the given name
	// (errdefs.ErrNotFound).
	GetSecret(ctx context.Context, tenant, name string) (*sandbox.Secret, error)
	// ListSecrets returns the secrets of tenant ("" for every one) by
	// tenant and name.
	ListSecrets(ctx context.Context, tenant string) ([]*sandbox.Secret, error)
	// DeleteSecret removes a secret and its uses (errdefs.ErrNotFound).
	DeleteSecret(ctx context.Context, tenant, name string) error

	// AppendLedger keeps credential uses and egress denials in one write,
	// setting their Seq; each secret's uses and each sandbox's denials are
	// bounded, the oldest going first. A sandbox's denials go with its
	// record.
	AppendLedger(ctx context.Context, uses []sandbox.CredentialUse, denials []sandbox.EgressDecision) error
	// CredentialUses returns the newest limit uses of a tenant's secret
	// whose Seq is past after, oldest first.
	CredentialUses(ctx context.Context, tenant, secret string, after int64, limit int) ([]sandbox.CredentialUse, error)
	// EgressDenials returns the newest limit denials of sandbox id whose
	// Seq is past after, oldest first.
	EgressDenials(ctx context.Context, id string, after int64, limit int) ([]sandbox.EgressDecision, error)
	// ClaimSandbox turns the oldest ready member of a tenant's pool into the
	// caller's sandbox in one transaction: it is renamed, takes the
	// claim's request id and labels (its pool label goes) and gets c.Op,
	// settled, in its journal. No member of the pool is ready:
	// ErrNoneReady. A request id that created or claimed a sandbox already
	// returns that sandbox with claimed=false.
	ClaimSandbox(ctx context.Context, tenant, pool string, c Claim) (sb *sandbox.Sandbox, claimed bool, err error)

	// CreateTenant inserts a tenant; a taken name is
	// errdefs.ErrAlreadyExists.
	CreateTenant(ctx context.Context, t *sandbox.Tenant) error
	// UpdateTenant replaces a tenant's quota and UpdatedAt
	// (errdefs.ErrNotFound).
	UpdateTenant(ctx context.Context, t *sandbox.Tenant) error
	// GetTenant returns a tenant and what its sandboxes hold
	// (errdefs.ErrNotFound).
	GetTenant(ctx context.Context, name string) (*sandbox.Tenant, sandbox.Usage, error)
	// ListTenants returns every tenant by name.
	ListTenants(ctx context.Context) ([]*sandbox.Tenant, error)
	// DeleteTenant removes a tenant with its pools, secrets and tokens. A
	// tenant with a sandbox not being deleted is
	// errdefs.ErrFailedPrecondition.
	DeleteTenant(ctx context.Context, name string) error

	// CreateToken inserts a token of an existing tenant; a taken name is
	// errdefs.ErrAlreadyExists.
	CreateToken(ctx context.Context, t *sandbox.Token) error
	// TokenByHash returns the token with the given hash
	// (errdefs.ErrNotFound), revoked and expired ones too.
	TokenByHash(ctx context.Context, hash []byte) (*sandbox.Token, error)
	// ListTokens returns the tokens of tenant ("" for every one), oldest
	// first.
	ListTokens(ctx context.Context, tenant string) ([]*sandbox.Token, error)
	// RevokeToken revokes the token with the given name or id at at
	// (errdefs.ErrNotFound), and returns it.
	RevokeToken(ctx context.Context, nameOrID string, at time.Time) (*sandbox.Token, error)

	// CreateSnapshot inserts a snapshot being taken in its tenant, which
	// must exist; a name taken there is errdefs.ErrAlreadyExists.
	CreateSnapshot(ctx context.Context, s *sandbox.Snapshot) error
	// FinishSnapshot makes a snapshot being taken ready with its manifest,
	// files, bytes and spec (errdefs.ErrNotFound when it is not being taken); one
	// that would take its tenant's snapshots past their quota is
	// errdefs.ErrResourceExhausted, decided in the same transaction.
	FinishSnapshot(ctx context.Context, s *sandbox.Snapshot) error
	// GetSnapshot returns the snapshot of tenant ("" for any) with the
	// given name, else id (errdefs.ErrNotFound), in any state.
	GetSnapshot(ctx context.Context, tenant, nameOrID string) (*sandbox.Snapshot, error)
	// ListSnapshots returns the snapshots of tenant ("" for every one), in
	// every state, oldest first.
	ListSnapshots(ctx context.Context, tenant string) ([]*sandbox.Snapshot, error)
	// DeleteSnapshot removes a snapshot's record (errdefs.ErrNotFound).
	DeleteSnapshot(ctx context.Context, id string) error

	// Close flushes and closes the store.
	Close() error
}

// KeptUses and KeptDenials bound the ledgers: the newest of each secret's
// uses and of each sandbox's denials are kept, the oldest go first (a
// store may hold up to a tenth more for a while).
const (
	KeptUses    = 10000
	KeptDenials = 1000
)

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
