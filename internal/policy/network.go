package policy

import (
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"sync"

	"gopkg.in/yaml.v3"
)

// NetworkPolicy is one entry of network_policies: a name of the user's
// choosing and the endpoints it allows. No network_policies: no egress.
type NetworkPolicy struct {
	Name      string     `json:"name"`
	Endpoints []Endpoint `json:"endpoints"`
}

// Endpoint is a destination a sandbox may reach through its egress proxy.
type Endpoint struct {
	// Host is a lower-case name, an IP address, or "*." followed by a name:
	// the star stands for exactly one whole first label ("*.example.com"
	// matches "a.example.com", not "example.com" nor "a.b.example.com").
	Host  string `json:"host"`
	Ports []int  `json:"ports"`
	// Access is "", AccessReadOnly, AccessReadWrite or AccessFull.
	Access    string     `json:"access,omitempty"`
	Rules     []HTTPRule `json:"rules,omitempty"`
	DenyRules []HTTPRule `json:"deny_rules,omitempty"`
	// Enforcement is Enforce (the default) or Audit.
	Enforcement string `json:"enforcement"`
	// AllowedIPs are the loopback, private, link-local or gateway addresses
	// this endpoint may reach; others are refused whatever the host.
	AllowedIPs []netip.Prefix `json:"allowed_ips,omitempty"`
	// AllowUpgrade lets a request on an inspected endpoint switch
	// protocols (a WebSocket): what follows the switch is not HTTP, and
	// no rule sees it.
	AllowUpgrade bool `json:"allow_upgrade,omitempty"`
}

// HTTPRule is an allow or deny rule of an inspected endpoint. Method is an
// upper-case method or "*" (any). Path starts with "/"; a segment "*"
// matches exactly one non-empty segment, and a last segment "**" matches
// what is left, from nothing to many segments. The query is not matched.
type HTTPRule struct {
	Method string `json:"method"`
	Path   string `json:"path"`
}

// The accesses of an endpoint: which HTTP methods it allows.
const (
	AccessReadOnly  = "read-only"  // GET, HEAD, OPTIONS
	AccessReadWrite = "read-write" // read-only's and POST, PUT, PATCH, DELETE
	AccessFull      = "full"       // any method
)

// The enforcements of an endpoint.
const (
	Enforce = "enforce" // refuse what the rules do not allow
	Audit   = "audit"   // allow it, but report what enforce would refuse
)

// Inspects says whether the endpoint needs HTTP-level inspection (TLS
// terminated by the proxy): access, rules or deny_rules are set.
func (e Endpoint) Inspects() bool {
	return e.Access != "" || len(e.Rules) > 0 || len(e.DenyRules) > 0
}

// ParseNetwork parses a whole policy document, validated as Parse does,
// and returns only its network_policies: what `policy set` replaces on a
// running sandbox.
func ParseNetwork(text string) ([]NetworkPolicy, error) {
	p, err := Parse(text)
	return p.Network, err
}

// The patterns are compiled when first used: their counted repetitions
// make large programs, and every program start of the supervisor (each
// exec stage too) links this package without parsing any network policy.
var (
	policyName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$`) })
	hostLabel  = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`) })
	httpMethod = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Z][A-Z-]{0,31}$`) })
)

// network reads network_policies: a mapping of names to policies, kept in
// the file's order.
func network(n *yaml.Node, field string) ([]NetworkPolicy, error) {
	if n.Kind != yaml.MappingNode {
		return nil, &Error{Line: n.Line, Field: field, Msg: fmt.Sprintf("want a mapping of names to network policies, not %s", describe(n))}
	}
	out := []NetworkPolicy{}
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		f := field + "." + k.Value
		if k.Kind != yaml.ScalarNode || !policyName().MatchString(k.Value) {
			return nil, &Error{Line: k.Line, Field: f, Msg: "a network policy's name is 1 to 63 letters, digits, '_', '.' or '-', starting with a letter or digit"}
		}
		if prev, dup := seen[k.Value]; dup {
			return nil, &Error{Line: k.Line, Field: f, Msg: fmt.Sprintf("given twice (first on line %d)", prev)}
		}
		seen[k.Value] = k.Line
		np := NetworkPolicy{Name: k.Value}
		var endpointsSeen bool
		err := walk(v, f, fields{"endpoints": func(n *yaml.Node, f string) (err error) {
			endpointsSeen = true
			np.Endpoints, err = endpoints(n, f)
			return err
		}})
		if err != nil {
			return nil, err
		}
		if !endpointsSeen {
			return nil, &Error{Line: v.Line, Field: f, Msg: "want endpoints: a list of the hosts this policy allows"}
		}
		out = append(out, np)
	}
	return out, nil
}

func endpoints(n *yaml.Node, field string) ([]Endpoint, error) {
	if n.Kind != yaml.SequenceNode || len(n.Content) == 0 {
		return nil, &Error{Line: n.Line, Field: field, Msg: fmt.Sprintf("want a list of one endpoint or more, not %s", describeList(n))}
	}
	out := make([]Endpoint, 0, len(n.Content))
	for i, item := range n.Content {
		e, err := endpoint(item, fmt.Sprintf("%s[%d]", field, i))
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

func endpoint(n *yaml.Node, field string) (Endpoint, error) {
	e := Endpoint{Enforcement: Enforce}
	var portLine int
	err := walk(n, field, fields{
		"host": func(n *yaml.Node, f string) (err error) {
			e.Host, err = host(n, f)
			return err
		},
		"port": func(n *yaml.Node, f string) error {
			if portLine != 0 {
				return &Error{Line: n.Line, Field: f, Msg: fmt.Sprintf("give port or ports, not both (ports is on line %d)", portLine)}
			}
			portLine = n.Line
			p, err := integer(n, f, 1, 65535)
			e.Ports = []int{p}
			return err
		},
		"ports": func(n *yaml.Node, f string) (err error) {
			if portLine != 0 {
				return &Error{Line: n.Line, Field: f, Msg: fmt.Sprintf("give port or ports, not both (port is on line %d)", portLine)}
			}
			portLine = n.Line
			e.Ports, err = ports(n, f)
			return err
		},
		"access": func(n *yaml.Node, f string) (err error) {
			e.Access, err = oneOf(n, f, AccessReadOnly, AccessReadWrite, AccessFull)
			return err
		},
		"rules": func(n *yaml.Node, f string) (err error) {
			e.Rules, err = httpRules(n, f, "allow")
			return err
		},
		"deny_rules": func(n *yaml.Node, f string) (err error) {
			e.DenyRules, err = httpRules(n, f, "deny")
			return err
		},
		"enforcement": func(n *yaml.Node, f string) (err error) {
			e.Enforcement, err = oneOf(n, f, Enforce, Audit)
			return err
		},
		"allowed_ips": func(n *yaml.Node, f string) (err error) {
			e.AllowedIPs, err = prefixes(n, f)
			return err
		},
		"allow_upgrade": func(n *yaml.Node, f string) (err error) {
			e.AllowUpgrade, err = boolean(n, f)
			return err
		},
	})
	switch {
	case err != nil:
		return e, err
	case e.Host == "":
		return e, &Error{Line: n.Line, Field: field + ".host", Msg: "every endpoint needs a host"}
	case e.Ports == nil:
		return e, &Error{Line: n.Line, Field: field + ".port", Msg: "every endpoint needs a port or ports"}
	case e.AllowUpgrade && !e.Inspects():
		return e, &Error{Line: n.Line, Field: field + ".allow_upgrade", Msg: "only an endpoint with access, rules or deny_rules inspects requests; a pass-through one passes upgrades already"}
	}
	return e, nil
}

// describeList is describe, telling an empty list apart.
func describeList(n *yaml.Node) string {
	if n.Kind == yaml.SequenceNode && len(n.Content) == 0 {
		return "an empty list"
	}
	return describe(n)
}

// host reads an endpoint's host: a DNS name (lower-cased), "*." and a name
// of two labels or more, or an IP address.
func host(n *yaml.Node, field string) (string, error) {
	const want = `a host name such as pypi.org, "*." and a name such as *.pythonhosted.org, or an IP address`
	s, err := scalar(n, field, want)
	if err != nil {
		return "", err
	}
	if a, err := netip.ParseAddr(s); err == nil && a.Zone() == "" {
		return a.Unmap().String(), nil
	}
	name, wild := strings.CutPrefix(strings.ToLower(s), "*.")
	labels := strings.Split(name, ".")
	ok := len(name) <= 253 && (!wild || len(labels) >= 2)
	for _, l := range labels {
		ok = ok && hostLabel().MatchString(l)
	}
	if !ok {
		return "", &Error{Line: n.Line, Field: field, Msg: fmt.Sprintf("want %s, not %q", want, s)}
	}
	return strings.ToLower(s), nil
}

func ports(n *yaml.Node, field string) ([]int, error) {
	if n.Kind != yaml.SequenceNode || len(n.Content) == 0 {
		return nil, &Error{Line: n.Line, Field: field, Msg: fmt.Sprintf("want a list of one port or more, not %s", describeList(n))}
	}
	var out []int
	for i, item := range n.Content {
		f := fmt.Sprintf("%s[%d]", field, i)
		p, err := integer(item, f, 1, 65535)
		if err != nil {
			return nil, err
		}
		for _, q := range out {
			if q == p {
				return nil, &Error{Line: item.Line, Field: f, Msg: fmt.Sprintf("port %d is listed twice", p)}
			}
		}
		out = append(out, p)
	}
	return out, nil
}

// httpRules reads rules or deny_rules: a list of {KEY: {method, path}}.
func httpRules(n *yaml.Node, field, key string) ([]HTTPRule, error) {
	if n.Kind != yaml.SequenceNode {
		return nil, &Error{Line: n.Line, Field: field, Msg: fmt.Sprintf("want a list of {%s: {method: M, path: P}}, not %s", key, describe(n))}
	}
	out := make([]HTTPRule, 0, len(n.Content))
	for i, item := range n.Content {
		f := fmt.Sprintf("%s[%d]", field, i)
		var r HTTPRule
		var given bool
		err := walk(item, f, fields{key: func(n *yaml.Node, f string) (err error) {
			given = true
			r, err = httpRule(n, f)
			return err
		}})
		if err != nil {
			return nil, err
		}
		if !given {
			return nil, &Error{Line: item.Line, Field: f, Msg: fmt.Sprintf("want {%s: {method: M, path: P}}", key)}
		}
		out = append(out, r)
	}
	return out, nil
}

func httpRule(n *yaml.Node, field string) (HTTPRule, error) {
	var r HTTPRule
	err := walk(n, field, fields{
		"method": func(n *yaml.Node, f string) error {
			s, err := scalar(n, f, `an HTTP method such as GET, or "*"`)
			if err == nil && s != "*" && !httpMethod().MatchString(s) {
				err = &Error{Line: n.Line, Field: f, Msg: fmt.Sprintf(`want an upper-case HTTP method such as GET, or "*", not %q`, s)}
			}
			r.Method = s
			return err
		},
		"path": func(n *yaml.Node, f string) error {
			s, err := scalar(n, f, `a path such as "/repos/*/issues"`)
			if err == nil {
				err = checkPathGlob(s)
			}
			if err != nil && s != "" {
				err = &Error{Line: n.Line, Field: f, Msg: fmt.Sprintf("%q: %v", s, err)}
			}
			r.Path = s
			return err
		},
	})
	switch {
	case err != nil:
		return r, err
	case r.Method == "":
		return r, &Error{Line: n.Line, Field: field + ".method", Msg: `every rule needs a method (or "*")`}
	case r.Path == "":
		return r, &Error{Line: n.Line, Field: field + ".path", Msg: `every rule needs a path (or "/**")`}
	}
	return r, nil
}

// checkPathGlob checks a rule's path: absolute, no dot segments, "*" only
// as a whole segment and "**" only as the last.
func checkPathGlob(p string) error {
	if !strings.HasPrefix(p, "/") {
		return fmt.Errorf("a rule's path starts with /")
	}
	segs := strings.Split(p[1:], "/")
	for i, s := range segs {
		switch {
		case s == "." || s == "..":
			return fmt.Errorf("a rule's path has no . or .. segments")
		case s == "**" && i != len(segs)-1:
			return fmt.Errorf(`"**" may only be the last segment`)
		case s != "*" && s != "**" && strings.Contains(s, "*"):
			return fmt.Errorf(`"*" stands for a whole segment: write /a/*/b, not /a/b*`)
		}
	}
	return nil
}

// prefixes reads allowed_ips: CIDRs (without host bits) or single
// addresses.
func prefixes(n *yaml.Node, field string) ([]netip.Prefix, error) {
	if n.Kind != yaml.SequenceNode {
		return nil, &Error{Line: n.Line, Field: field, Msg: fmt.Sprintf("want a list of CIDRs or IP addresses such as [10.20.0.0/16], not %s", describe(n))}
	}
	out := make([]netip.Prefix, 0, len(n.Content))
	for i, item := range n.Content {
		f := fmt.Sprintf("%s[%d]", field, i)
		s, err := scalar(item, f, "a CIDR such as 10.20.0.0/16 or an IP address")
		if err != nil {
			return nil, err
		}
		var p netip.Prefix
		if a, aerr := netip.ParseAddr(s); aerr == nil && a.Zone() == "" {
			a = a.Unmap()
			p = netip.PrefixFrom(a, a.BitLen())
		} else if p, err = netip.ParsePrefix(s); err != nil {
			return nil, &Error{Line: item.Line, Field: f, Msg: fmt.Sprintf("want a CIDR such as 10.20.0.0/16 or an IP address, not %q", s)}
		} else if p != p.Masked() {
			return nil, &Error{Line: item.Line, Field: f, Msg: fmt.Sprintf("%s has bits set past its /%d: write %s", s, p.Bits(), p.Masked())}
		}
		out = append(out, p)
	}
	return out, nil
}

// Matches says whether the rule applies to a request: the same method (or
// the rule's "*"), and a path (without its query) whose segments match the
// rule's, "*" matching one non-empty segment and a last "**" the rest.
func (r HTTPRule) Matches(method, path string) bool { return r.matches(method, path, false) }

// MatchesFold is Matches with the path's letters compared without case: a
// deny rule's, which must also refuse /ADMIN to a server that serves
// /admin for it.
func (r HTTPRule) MatchesFold(method, path string) bool { return r.matches(method, path, true) }

func (r HTTPRule) matches(method, path string, fold bool) bool {
	if r.Method != "*" && r.Method != method {
		return false
	}
	same := func(a, b string) bool { return a == b || fold && strings.EqualFold(a, b) }
	pat := strings.Split(strings.TrimPrefix(r.Path, "/"), "/")
	segs := strings.Split(strings.TrimPrefix(path, "/"), "/")
	for i, p := range pat {
		switch {
		case p == "**":
			return true
		case i >= len(segs):
			return false
		case p == "*" && segs[i] == "", p != "*" && !same(p, segs[i]):
			return false
		}
	}
	return len(segs) == len(pat) && strings.HasPrefix(path, "/")
}

// FindEndpoint returns the first endpoint, in the rules' order, that
// allows host (lower case, no trailing dot) on port: the name of its
// policy, its index there and itself.
func FindEndpoint(rules []NetworkPolicy, host string, port int) (string, int, Endpoint, bool) {
	for _, np := range rules {
		for i, e := range np.Endpoints {
			if HostMatches(e.Host, host) && slices.Contains(e.Ports, port) {
				return np.Name, i, e, true
			}
		}
	}
	return "", 0, Endpoint{}, false
}

// HostMatches says whether an endpoint's host pattern allows host: the
// same name, or "*.rest" and a host of exactly one more label than rest
// ("*.example.com" matches "a.example.com", not "example.com" nor
// "a.b.example.com").
func HostMatches(pattern, host string) bool {
	rest, wild := strings.CutPrefix(pattern, "*.")
	if !wild {
		return pattern == host
	}
	label, tail, ok := strings.Cut(host, ".")
	return ok && label != "" && tail == rest
}
