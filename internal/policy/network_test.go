package policy

import (
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

// networkExample is the README's network policy, with a deny rule and a
// wildcard.
const networkExample = `version: 1
network_policies:
  pypi:                              # a name of the user's choosing
    endpoints:
      - host: pypi.org
        port: 443
      - host: "*.PythonHosted.org"
        ports: [80, 443]
  github:
    endpoints:
      - host: api.github.com
        port: 443
        access: read-only
        rules:
          - allow: {method: POST, path: "/repos/*/issues"}
        deny_rules:
          - deny: {method: "*", path: "/admin/**"}
        enforcement: audit
      - host: db.internal
        port: 5432
        allowed_ips: [10.20.0.0/16, 127.0.0.1, "::ffff:10.1.2.3"]
`

func TestParseNetworkExample(t *testing.T) {
	got, err := ParseNetwork(networkExample)
	if err != nil {
		t.Fatal(err)
	}
	want := []NetworkPolicy{
		{Name: "pypi", Endpoints: []Endpoint{
			{Host: "pypi.org", Ports: []int{443}, Enforcement: Enforce},
			{Host: "*.pythonhosted.org", Ports: []int{80, 443}, Enforcement: Enforce},
		}},
		{Name: "github", Endpoints: []Endpoint{
			{Host: "api.github.com", Ports: []int{443}, Access: AccessReadOnly,
				Rules:     []HTTPRule{{Method: "POST", Path: "/repos/*/issues"}},
				DenyRules: []HTTPRule{{Method: "*", Path: "/admin/**"}}, Enforcement: Audit},
			{Host: "db.internal", Ports: []int{5432}, Enforcement: Enforce, AllowedIPs: []netip.Prefix{
				netip.MustParsePrefix("10.20.0.0/16"), netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("10.1.2.3/32")}},
		}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ParseNetwork =\n%+v\nwant\n%+v", got, want)
	}
	if got[0].Endpoints[0].Inspects() || !got[1].Endpoints[0].Inspects() || got[1].Endpoints[1].Inspects() {
		t.Errorf("Inspects: want only api.github.com inspected")
	}
	if !(Endpoint{DenyRules: want[1].Endpoints[0].DenyRules}).Inspects() || !(Endpoint{Access: AccessFull}).Inspects() {
		t.Errorf("Inspects: deny_rules alone or access alone need inspection")
	}
}

func TestNoNetworkPoliciesIsNoEgress(t *testing.T) {
	for _, text := range []string{"version: 1\n", "version: 1\nnetwork_policies: {}\n"} {
		p, err := Parse(text)
		if err != nil || len(p.Network) != 0 {
			t.Errorf("Parse(%q) = %+v, %v; want no network policies", text, p.Network, err)
		}
	}
	if _, err := ParseNetwork("version: 1\nnetwork_policies: {a: {endpoints: [{host: a.test, port: 0}]}}\n"); err == nil {
		t.Error("ParseNetwork accepted port 0")
	}
}

// malformedNetwork are network policies that must be refused, with the line
// and the text their error must name.
var malformedNetwork = []struct {
	text string
	line int
	want string
}{
	{"network_policies: []\n", 2, "network_policies: want a mapping of names"},
	{"network_policies: pypi\n", 2, "network_policies: want a mapping"},
	{"network_policies:\n  pypi: [a]\n", 3, "network_policies.pypi: want a mapping of endpoints"},
	{"network_policies:\n  pypi: {}\n", 3, "network_policies.pypi: want endpoints"},
	{"network_policies:\n  pypi:\n    endpoint: []\n", 4, "network_policies.pypi.endpoint: unknown key"},
	{"network_policies:\n  pypi:\n    endpoints: []\n", 4, "network_policies.pypi.endpoints: want a list of one endpoint or more, not an empty list"},
	{"network_policies:\n  pypi:\n    endpoints: pypi.org\n", 4, "endpoints: want a list"},
	{"network_policies:\n  pypi:\n    endpoints: [pypi.org]\n", 4, "endpoints[0]: want a mapping"},
	{"network_policies:\n  pypi: {endpoints: [{host: a.test, port: 1}]}\n  pypi: {endpoints: [{host: a.test, port: 1}]}\n", 4, "network_policies.pypi: given twice (first on line 3)"},
	{"network_policies:\n  \"bad name\": {endpoints: [{host: a.test, port: 1}]}\n", 3, "network_policies.bad name: a network policy's name"},
	{"network_policies:\n  [a]: {endpoints: [{host: a.test, port: 1}]}\n", 3, "a network policy's name"},
	{"network_policies:\n  p:\n    endpoints:\n      - port: 443\n", 5, "endpoints[0].host: every endpoint needs a host"},
	{"network_policies:\n  p:\n    endpoints:\n      - host: a.test\n", 5, "endpoints[0].port: every endpoint needs a port or ports"},
	{"network_policies:\n  p:\n    endpoints:\n      - host: a.test\n        port: 443\n        ports: [80]\n", 7, "endpoints[0].ports: give port or ports, not both (port is on line 6)"},
	{"network_policies:\n  p:\n    endpoints:\n      - host: a.test\n        ports: [80]\n        port: 443\n", 7, "endpoints[0].port: give port or ports, not both"},
	{"network_policies:\n  p:\n    endpoints:\n      - {host: a.test, port: 0}\n", 5, "endpoints[0].port: want a whole number from 1 to 65535"},
	{"network_policies:\n  p:\n    endpoints:\n      - {host: a.test, port: 65536}\n", 5, "port: want a whole number from 1 to 65535"},
	{"network_policies:\n  p:\n    endpoints:\n      - {host: a.test, port: https}\n", 5, "port: want a whole number"},
	{"network_policies:\n  p:\n    endpoints:\n      - {host: a.test, port: \"443\"}\n", 5, "port: want a whole number"},
	{"network_policies:\n  p:\n    endpoints:\n      - host: a.test\n        ports: []\n", 6, "ports: want a list of one port or more"},
	{"network_policies:\n  p:\n    endpoints:\n      - host: a.test\n        ports: 443\n", 6, "ports: want a list"},
	{"network_policies:\n  p:\n    endpoints:\n      - host: a.test\n        ports:\n          - 80\n          - -1\n", 8, "ports[1]: want a whole number"},
	{"network_policies:\n  p:\n    endpoints:\n      - host: a.test\n        ports: [443, 443]\n", 6, "ports[1]: port 443 is listed twice"},
	{"network_policies:\n  p:\n    endpoints:\n      - {host: \"*.*.a.test\", port: 1}\n", 5, "endpoints[0].host: want a host name"},
	{"network_policies:\n  p:\n    endpoints:\n      - {host: \"a.*.test\", port: 1}\n", 5, "host: want a host name"},
	{"network_policies:\n  p:\n    endpoints:\n      - {host: \"*a.test\", port: 1}\n", 5, "host"},
	{"network_policies:\n  p:\n    endpoints:\n      - {host: \"*.test\", port: 1}\n", 5, "host"},
	{"network_policies:\n  p:\n    endpoints:\n      - {host: \"*\", port: 1}\n", 5, "host"},
	{"network_policies:\n  p:\n    endpoints:\n      - {host: \"a_b.test\", port: 1}\n", 5, "host"},
	{"network_policies:\n  p:\n    endpoints:\n      - {host: \"-a.test\", port: 1}\n", 5, "host"},
	{"network_policies:\n  p:\n    endpoints:\n      - {host: \"a.test.\", port: 1}\n", 5, "host"},
	{"network_policies:\n  p:\n    endpoints:\n      - {host: \"https://a.test\", port: 1}\n", 5, "host"},
	{"network_policies:\n  p:\n    endpoints:\n      - {host: \"a.test:443\", port: 1}\n", 5, "host"},
	{"network_policies:\n  p:\n    endpoints:\n      - {host: [a.test], port: 1}\n", 5, "host: want a host name"},
	{"network_policies:\n  p:\n    endpoints:\n      - {host: a.test, port: 1, hostname: b}\n", 5, "endpoints[0].hostname: unknown key"},
	{"network_policies:\n  p:\n    endpoints:\n      - host: a.test\n        port: 1\n        access: read_only\n", 7, "endpoints[0].access: want read-only or read-write or full"},
	{"network_policies:\n  p:\n    endpoints:\n      - host: a.test\n        port: 1\n        enforcement: warn\n", 7, "endpoints[0].enforcement: want enforce or audit"},
	{"network_policies:\n  p:\n    endpoints:\n      - host: a.test\n        port: 1\n        allowed_ips: 10.0.0.0/8\n", 7, "allowed_ips: want a list of CIDRs"},
	{"network_policies:\n  p:\n    endpoints:\n      - host: a.test\n        port: 1\n        allowed_ips:\n          - 10.0.0.0/8\n          - 10.0.0.0/33\n", 9, "allowed_ips[1]: want a CIDR"},
	{"network_policies:\n  p:\n    endpoints:\n      - host: a.test\n        port: 1\n        allowed_ips: [10.1.2.3/16]\n", 7, "allowed_ips[0]: 10.1.2.3/16 has bits set past its /16: write 10.1.0.0/16"},
	{"network_policies:\n  p:\n    endpoints:\n      - host: a.test\n        port: 1\n        allowed_ips: [db.internal]\n", 7, "allowed_ips[0]: want a CIDR"},
	{"network_policies:\n  p:\n    endpoints:\n      - host: a.test\n        port: 1\n        rules: {allow: {method: GET, path: /}}\n", 7, "endpoints[0].rules: want a list"},
	{"network_policies:\n  p:\n    endpoints:\n      - host: a.test\n        port: 1\n        rules:\n          - deny: {method: GET, path: /}\n", 8, "rules[0].deny: unknown key in network_policies.p.endpoints[0].rules[0] (known: allow)"},
	{"network_policies:\n  p:\n    endpoints:\n      - host: a.test\n        port: 1\n        deny_rules:\n          - allow: {method: GET, path: /}\n", 8, "deny_rules[0].allow: unknown key"},
	{"network_policies:\n  p:\n    endpoints:\n      - host: a.test\n        port: 1\n        rules:\n          - {}\n", 8, "rules[0]: want {allow: {method: M, path: P}}"},
	{"network_policies:\n  p:\n    endpoints:\n      - host: a.test\n        port: 1\n        rules:\n          - allow: {path: /}\n", 8, "rules[0].allow.method: every rule needs a method"},
	{"network_policies:\n  p:\n    endpoints:\n      - host: a.test\n        port: 1\n        rules:\n          - allow: {method: GET}\n", 8, "rules[0].allow.path: every rule needs a path"},
	{"network_policies:\n  p:\n    endpoints:\n      - host: a.test\n        port: 1\n        rules:\n          - allow: {method: get, path: /}\n", 8, "rules[0].allow.method: want an upper-case HTTP method"},
	{"network_policies:\n  p:\n    endpoints:\n      - host: a.test\n        port: 1\n        rules:\n          - allow:\n              method: GET\n              path: repos\n", 10, `rules[0].allow.path: "repos": a rule's path starts with /`},
	{"network_policies:\n  p:\n    endpoints:\n      - host: a.test\n        port: 1\n        rules:\n          - allow: {method: GET, path: /a/**/b}\n", 8, `"**" may only be the last segment`},
	{"network_policies:\n  p:\n    endpoints:\n      - host: a.test\n        port: 1\n        rules:\n          - allow: {method: GET, path: /a/b*}\n", 8, `"*" stands for a whole segment`},
	{"network_policies:\n  p:\n    endpoints:\n      - host: a.test\n        port: 1\n        deny_rules:\n          - deny: {method: GET, path: /a/../b}\n", 8, "deny_rules[0].deny.path"},
	{"network_policies:\n  p:\n    endpoints:\n      - host: a.test\n        port: 1\n        rules:\n          - allow: {method: GET, path: /, query: x}\n", 8, "rules[0].allow.query: unknown key"},
	{"network_policies:\n  p:\n    endpoints:\n      - host: a.test\n        port: 1\n        rules:\n          - allow: {method: [GET], path: /}\n", 8, "rules[0].allow.method"},
}

func TestMalformedNetworkPoliciesNameTheLineAndField(t *testing.T) {
	if len(malformedNetwork) < 30 {
		t.Fatalf("only %d malformed network policies; the issue asks for 30", len(malformedNetwork))
	}
	for _, tc := range malformedNetwork {
		text := "version: 1\n" + tc.text
		_, err := ParseNetwork(text)
		var e *Error
		if !errors.As(err, &e) {
			t.Errorf("ParseNetwork(%q) = %v; want a policy error", text, err)
			continue
		}
		if e.Line != tc.line || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseNetwork(%q) = %q (line %d); want line %d and %q", text, err, e.Line, tc.line, tc.want)
		}
	}
}

func TestHTTPRuleMatches(t *testing.T) {
	for _, tc := range []struct {
		rule, method, path string
		want               bool
	}{
		{"POST /repos/*/issues", "POST", "/repos/corral/issues", true},
		{"POST /repos/*/issues", "GET", "/repos/corral/issues", false},
		{"POST /repos/*/issues", "POST", "/repos/a/b/issues", false},
		{"POST /repos/*/issues", "POST", "/repos//issues", false},
		{"POST /repos/*/issues", "POST", "/repos/corral/issues/", false},
		{"POST /repos/*/issues", "POST", "/repos/corral", false},
		{"* /admin/**", "DELETE", "/admin", true},
		{"* /admin/**", "GET", "/admin/users/1", true},
		{"* /admin/**", "GET", "/administrator", false},
		{"GET /", "GET", "/", true},
		{"GET /", "GET", "/x", false},
		{"GET /**", "GET", "/anything/at/all", true},
		{"GET /a", "GET", "a", false},
	} {
		method, path, _ := strings.Cut(tc.rule, " ")
		if got := (HTTPRule{Method: method, Path: path}).Matches(tc.method, tc.path); got != tc.want {
			t.Errorf("%s matches %s %s = %v, want %v", tc.rule, tc.method, tc.path, got, tc.want)
		}
	}
}
