package egress

import (
	"fmt"
	"slices"
	"strings"

	"github.com/corral-sandbox/corral/internal/policy"
)

// match is the endpoint that allows a host and port, and the policy it is
// in.
type match struct {
	policy   string
	index    int // of the endpoint in the policy, for messages
	endpoint policy.Endpoint
}

// findEndpoint returns the first endpoint, in the rules' order, that
// allows host (lower case, no trailing dot) on port.
func findEndpoint(rules []policy.NetworkPolicy, host string, port int) (match, bool) {
	for _, np := range rules {
		for i, e := range np.Endpoints {
			if hostMatches(e.Host, host) && slices.Contains(e.Ports, port) {
				return match{policy: np.Name, index: i, endpoint: e}, true
			}
		}
	}
	return match{}, false
}

// hostMatches says whether an endpoint's host pattern allows host: the
// same name, or "*.rest" and a host of exactly one more label than rest
// ("*.example.com" matches "a.example.com", not "example.com" nor
// "a.b.example.com").
func hostMatches(pattern, host string) bool {
	rest, wild := strings.CutPrefix(pattern, "*.")
	if !wild {
		return pattern == host
	}
	label, tail, ok := strings.Cut(host, ".")
	return ok && label != "" && tail == rest
}

// readOnly and readWrite are the methods of the accesses.
var (
	readOnly  = []string{"GET", "HEAD", "OPTIONS"}
	readWrite = []string{"GET", "HEAD", "OPTIONS", "POST", "PUT", "PATCH", "DELETE"}
)

// allowsRequest decides an HTTP request on an inspected endpoint: a
// matching deny rule refuses; then access, then any allow rule, allows.
// An endpoint with only deny_rules allows what they do not refuse. It
// returns the rule that decided, or why nothing allowed the request.
func (m match) allowsRequest(method, path string) (bool, string) {
	e := m.endpoint
	where := fmt.Sprintf("network_policies.%s.endpoints[%d]", m.policy, m.index)
	if dotSegments(path) {
		return false, fmt.Sprintf("%s: the path %q has . or .. segments or an encoded /", where, path)
	}
	for i, r := range e.DenyRules {
		if r.Matches(method, path) {
			return false, fmt.Sprintf("%s.deny_rules[%d] (%s %s)", where, i, r.Method, r.Path)
		}
	}
	switch {
	case e.Access == policy.AccessFull,
		e.Access == policy.AccessReadOnly && slices.Contains(readOnly, method),
		e.Access == policy.AccessReadWrite && slices.Contains(readWrite, method):
		return true, fmt.Sprintf("%s.access (%s)", where, e.Access)
	case e.Access == "" && len(e.Rules) == 0:
		return true, where + " (deny_rules only)"
	}
	for i, r := range e.Rules {
		if r.Matches(method, path) {
			return true, fmt.Sprintf("%s.rules[%d] (%s %s)", where, i, r.Method, r.Path)
		}
	}
	why := where + ": no rule allows " + method + " " + path
	if e.Access != "" {
		why = fmt.Sprintf("%s.access (%s) does not allow %s, and no rule allows %s %s", where, e.Access, method, method, path)
	}
	return false, why
}

// dotSegments says whether a request path could mean another path to the
// server than to the rules: "." or ".." segments, an encoded "/" or "\".
func dotSegments(path string) bool {
	for _, s := range strings.Split(path, "/") {
		if s == "." || s == ".." {
			return true
		}
	}
	return strings.ContainsAny(path, `\`) || strings.Contains(strings.ToLower(path), "%2f") || strings.Contains(strings.ToLower(path), "%5c")
}
