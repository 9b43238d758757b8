package egress

import (
	"fmt"
	"net/url"
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
	name, i, e, ok := policy.FindEndpoint(rules, host, port)
	return match{policy: name, index: i, endpoint: e}, ok
}

// readOnly and readWrite are the methods of the accesses.
var (
	readOnly  = []string{"GET", "HEAD", "OPTIONS"}
	readWrite = []string{"GET", "HEAD", "OPTIONS", "POST", "PUT", "PATCH", "DELETE"}
)

// allowsRequest decides an HTTP request on an inspected endpoint, on its
// normal path (see normalPath): a protocol upgrade the endpoint does not
// allow refuses; a method override header is decided as a second method,
// and both must be allowed. It returns the rule that decided, or why
// nothing allowed the request.
func (m match) allowsRequest(f *flow) (bool, string) {
	where := fmt.Sprintf("network_policies.%s.endpoints[%d]", m.policy, m.index)
	path, err := normalPath(f.path)
	if err != nil {
		return false, fmt.Sprintf("%s: the path %q %v", where, f.path, err)
	}
	if f.upgrade != "" && !m.endpoint.AllowUpgrade {
		return false, fmt.Sprintf("%s inspects requests, and a switch to %q would end that: allow_upgrade: true allows it", where, f.upgrade)
	}
	ok, why := m.allowsMethod(where, f.method, path)
	if ok && f.override != "" && f.override != f.method {
		if ok, why = m.allowsMethod(where, f.override, path); !ok {
			why = fmt.Sprintf("a method override to %s: %s", f.override, why)
		}
	}
	return ok, why
}

// allowsMethod decides method on a normal path: a matching deny rule
// refuses (its path compared without case); then access, then any allow
// rule, allows. An endpoint with only deny_rules allows what they do not
// refuse.
func (m match) allowsMethod(where, method, path string) (bool, string) {
	e := m.endpoint
	for i, r := range e.DenyRules {
		if r.MatchesFold(method, path) {
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

// normalPath is the path a request names, as the rules see it: its
// percent-encoding decoded once. A path that a server could read as
// another one is refused instead, with why: "." or ".." segments (encoded
// or not), an empty segment ("//admin"), an encoded "/" or "\", a "\",
// ";" (path parameters: /admin;x), a control character, or an escape left
// after decoding (encoded twice: %2561).
func normalPath(raw string) (string, error) {
	if raw == "" {
		return "/", nil
	}
	lower := strings.ToLower(raw)
	for _, bad := range []string{"%2f", "%5c", "%00"} {
		if strings.Contains(lower, bad) {
			return "", fmt.Errorf("has an encoded / or \\ or NUL (%s)", bad)
		}
	}
	path, err := url.PathUnescape(raw)
	if err != nil {
		return "", fmt.Errorf("is not percent-encoded right: %v", err)
	}
	if i := strings.IndexByte(path, '%'); i >= 0 && i+2 < len(path) && isHex(path[i+1]) && isHex(path[i+2]) {
		return "", fmt.Errorf("is encoded twice (%s)", path[i:i+3])
	}
	if strings.ContainsAny(path, "\\;") || strings.ContainsFunc(path, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return "", fmt.Errorf(`has a "\\", a ";" or a control character`)
	}
	if !strings.HasPrefix(path, "/") {
		return "", fmt.Errorf("does not start with /")
	}
	segs := strings.Split(path[1:], "/")
	for i, seg := range segs {
		switch {
		case seg == "." || seg == "..":
			return "", fmt.Errorf("has . or .. segments")
		case seg == "" && i < len(segs)-1:
			return "", fmt.Errorf("has an empty segment (//)")
		}
	}
	return path, nil
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}
