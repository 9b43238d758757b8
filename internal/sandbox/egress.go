package sandbox

import (
	"net/netip"
	"time"
)

// EgressDecision is one connection or request a sandbox's egress proxy
// decided.
type EgressDecision struct {
	Seq           int64 // the ledger's, once kept
	SandboxID     string
	Time          time.Time
	Sandbox, Host string
	Port          int
	Addr          netip.Addr // the resolved address, when known
	Method, Path  string     // for HTTP requests
	Verdict       string     // allowed, denied or audited
	Policy        string     // the network_policies name, when an endpoint matched
	Reason        string     // the rule that decided, or why nothing allowed it
}

// CredentialUse is one injection of a credential by a sandbox's egress
// proxy, or one refusal of a request that carried its placeholder where
// the value may not go. It never holds the value.
type CredentialUse struct {
	Seq        int64 // the ledger's, once kept
	Time       time.Time
	Tenant     string // the secret's and the sandbox's
	Secret     string // the secret's name
	Credential string // the binding's name in the sandbox's policy
	SandboxID  string
	Sandbox    string
	Host       string
	Port       int
	Method     string
	Path       string
	Verdict    string // UseInjected or UseRefused
	Reason     string // why it was refused
	Status     int    // the upstream's HTTP status; 0 when none answered
}

// The verdicts of a CredentialUse.
const (
	UseInjected = "injected"
	UseRefused  = "refused"
)
