package sandbox

import (
	"net/netip"
	"time"
)

// EgressDecision is one connection or request a sandbox's egress proxy
// decided.
type EgressDecision struct {
	Time          time.Time
	Sandbox, Host string
	Port          int
	Addr          netip.Addr // the resolved address, when known
	Method, Path  string     // for HTTP requests
	Verdict       string     // allowed, denied or audited
	Policy        string     // the network_policies name, when an endpoint matched
	Reason        string     // the rule that decided, or why nothing allowed it
}
