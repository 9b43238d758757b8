package policy

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// credentialsExample is the README's credentials policy: a header, a
// query parameter, Basic auth and AWS signing, each where an inspecting
// network endpoint allows it.
const credentialsExample = `version: 1
network_policies:
  apis:
    endpoints:
      - {host: api.github.com, port: 443, access: read-write}
      - {host: maps.test, port: 443, access: read-only}
      - {host: registry.test, ports: [443, 8443], access: full}
      - {host: s3.test, port: 443, access: full}
credentials:
  github:
    secret: gh-token
    env: GITHUB_TOKEN
    inject:
      header: authorization
      format: "Bearer {value}"
    endpoints:
      - host: api.github.com
        port: 443
        paths: ["/repos/**"]
        methods: [GET, POST]
  maps:
    secret: maps-key
    env: MAPS_KEY
    inject: {query: key}
    endpoints: [{host: maps.test, port: 443}]
  registry:
    secret: registry-password
    env: REGISTRY_PASSWORD
    inject: {basic_auth: true, username: ci}
    endpoints: [{host: registry.test, ports: [443, 8443]}]
  s3:
    secret: aws-secret-key
    env: AWS_SECRET_ACCESS_KEY
    inject:
      aws_sigv4: {access_key_id: aws-key-id, env: AWS_ACCESS_KEY_ID, region: us-east-1, service: s3}
    endpoints: [{host: s3.test, port: 443}]
`

func TestParseCredentialsExample(t *testing.T) {
	p, err := Parse(credentialsExample)
	if err != nil {
		t.Fatal(err)
	}
	want := []Credential{
		{Name: "github", Secret: "gh-token", Env: "GITHUB_TOKEN", Inject: Injection{Header: "Authorization", Format: "Bearer {value}"},
			Endpoints: []CredentialEndpoint{{Host: "api.github.com", Ports: []int{443}, Paths: []string{"/repos/**"}, Methods: []string{"GET", "POST"}}}},
		{Name: "maps", Secret: "maps-key", Env: "MAPS_KEY", Inject: Injection{Query: "key"},
			Endpoints: []CredentialEndpoint{{Host: "maps.test", Ports: []int{443}}}},
		{Name: "registry", Secret: "registry-password", Env: "REGISTRY_PASSWORD", Inject: Injection{BasicAuth: true, Username: "ci"},
			Endpoints: []CredentialEndpoint{{Host: "registry.test", Ports: []int{443, 8443}}}},
		{Name: "s3", Secret: "aws-secret-key", Env: "AWS_SECRET_ACCESS_KEY",
			Inject:    Injection{SigV4: &SigV4{AccessKeyID: "aws-key-id", Env: "AWS_ACCESS_KEY_ID", Region: "us-east-1", Service: "s3"}},
			Endpoints: []CredentialEndpoint{{Host: "s3.test", Ports: []int{443}}}},
	}
	if !reflect.DeepEqual(p.Credentials, want) {
		t.Errorf("credentials =\n%+v\nwant\n%+v", p.Credentials, want)
	}
	if got := p.Secrets(); !reflect.DeepEqual(got, []string{"gh-token", "maps-key", "registry-password", "aws-secret-key", "aws-key-id"}) {
		t.Errorf("Secrets() = %v", got)
	}
	gh := want[0].Endpoints[0]
	for _, tc := range []struct {
		method, path string
		want         bool
	}{{"GET", "/repos/a/b", true}, {"POST", "/repos/a", true}, {"DELETE", "/repos/a", false}, {"GET", "/user", false}, {"GET", "/repos", true}, {"GET", "/repository", false}} {
		if got := gh.Allows(tc.method, tc.path); got != tc.want {
			t.Errorf("Allows(%s %s) = %v, want %v", tc.method, tc.path, got, tc.want)
		}
	}
}

// Each mistake is reported at its line and field.
func TestCredentialErrors(t *testing.T) {
	const network = `version: 1
network_policies:
  apis:
    endpoints:
      - {host: api.test, port: 443, access: read-only}
      - {host: plain.test, port: 443}
credentials:
`
	for _, tc := range []struct {
		body  string
		line  int
		field string
		msg   string
	}{
		{"  gh:\n    env: TOKEN\n    inject: {header: Authorization}\n    endpoints: [{host: api.test, port: 443}]\n", 8, "credentials.gh.secret", "names its secret"},
		{"  gh:\n    secret: Bad_Name\n", 9, "credentials.gh.secret", "invalid secret name"},
		{"  gh:\n    secret: t\n    endpoints: [{host: api.test, port: 443}]\n", 8, "credentials.gh.inject", "says where its value goes"},
		{"  gh:\n    secret: t\n    inject: {header: A, query: q}\n", 10, "credentials.gh.inject", "one of header, query"},
		{"  gh:\n    secret: t\n    inject: {header: Host}\n", 10, "credentials.gh.inject.header", "frames the request"},
		{"  gh:\n    secret: t\n    inject: {header: A, format: Bearer}\n", 10, "credentials.gh.inject.format", "holds {value} once"},
		{"  gh:\n    secret: t\n    inject: {basic_auth: true, format: \"x{value}\"}\n", 10, "credentials.gh.inject.format", "for a header or a query"},
		{"  gh:\n    secret: t\n    inject: {aws_sigv4: {env: AKID}}\n", 10, "credentials.gh.inject.aws_sigv4.access_key_id", "access key id"},
		{"  gh:\n    secret: t\n    inject: {header: A}\n    cookie: x\n", 11, "credentials.gh.cookie", "unknown key"},
		{"  gh:\n    secret: t\n    env: PATH\n", 10, "credentials.gh.env", "the gateway's to set"},
		{"  gh:\n    secret: t\n    env: 1X\n", 10, "credentials.gh.env", "environment variable"},
		{"  gh:\n    secret: t\n    inject: {header: A}\n    endpoints: []\n", 11, "credentials.gh.endpoints", "one endpoint or more"},
		{"  gh:\n    secret: t\n    inject: {header: A}\n    endpoints: [{host: api.test, port: 443, methods: [get]}]\n", 11, "credentials.gh.endpoints[0].methods[0]", "upper-case"},
		{"  gh:\n    secret: t\n    inject: {header: A}\n    endpoints: [{host: api.test, port: 443, paths: [/a*]}]\n", 11, "credentials.gh.endpoints[0].paths[0]", "whole segment"},
		{"  gh:\n    secret: t\n    inject: {header: A}\n    endpoints:\n      - {host: other.test, port: 443}\n", 12, "credentials.gh.endpoints[0]", "no network policy allows other.test port 443"},
		{"  gh:\n    secret: t\n    inject: {header: A}\n    endpoints:\n      - {host: plain.test, port: 443}\n", 12, "credentials.gh.endpoints[0]", "without inspecting it"},
		{"  a:\n    secret: t\n    env: TOKEN\n    inject: {header: A}\n    endpoints: [{host: api.test, port: 443}]\n  b:\n    secret: u\n    env: TOKEN\n    inject: {header: B}\n    endpoints: [{host: api.test, port: 443}]\n", 14, "credentials.b", "credentials.a's variable too"},
		{"  gh: [1]\n", 8, "credentials.gh", "want a mapping"},
	} {
		_, err := Parse(network + tc.body)
		var pe *Error
		if !errors.As(err, &pe) {
			t.Errorf("%q: err = %v, want a policy error", tc.body, err)
			continue
		}
		if pe.Line != tc.line || pe.Field != tc.field || !strings.Contains(pe.Msg, tc.msg) {
			t.Errorf("%q:\n got line %d, field %s: %s\nwant line %d, field %s, with %q", tc.body, pe.Line, pe.Field, pe.Msg, tc.line, tc.field, tc.msg)
		}
	}
}
