package egress

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/corral-sandbox/corral/internal/policy"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/secrets"
	"github.com/corral-sandbox/corral/internal/testenv"
)

// credentialsPolicy binds a token (header), a key (query), a password
// (Basic) and AWS keys (SigV4), each to an inspected endpoint; other.test
// is allowed and inspected, and bound to nothing; plain.test passes
// through.
const credentialsPolicy = `version: 1
network_policies:
  apis:
    endpoints:
      - {host: api.test, ports: [HTTP, HTTPS], access: full, allowed_ips: [127.0.0.0/8]}
      - {host: other.test, ports: [HTTP, HTTPS], access: full, allowed_ips: [127.0.0.0/8]}
      - {host: s3.test, port: HTTPS, access: full, allowed_ips: [127.0.0.0/8]}
      - {host: allowed.test, port: HTTP, allowed_ips: [127.0.0.0/8]}
credentials:
  github:
    secret: gh-token
    env: GITHUB_TOKEN
    inject: {header: Authorization, format: "Bearer {value}"}
    endpoints:
      - {host: api.test, port: HTTPS, paths: ["/repos/**"], methods: [GET, POST]}
  maps:
    secret: maps-key
    inject: {query: key}
    endpoints: [{host: api.test, port: HTTPS, paths: ["/maps/**"]}]
  registry:
    secret: registry-password
    inject: {basic_auth: true, username: ci}
    endpoints: [{host: api.test, port: HTTPS, paths: ["/v2/**"]}]
  s3:
    secret: aws-secret-key
    env: AWS_SECRET_ACCESS_KEY
    inject: {aws_sigv4: {access_key_id: aws-key-id, env: AWS_ACCESS_KEY_ID, region: us-east-1, service: s3}}
    endpoints: [{host: s3.test, port: HTTPS}]
`

// credWorld is a world whose proxy injects credentialsPolicy's secrets.
type credWorld struct {
	*world
	ph      map[string]string // credential (and "s3/key-id") to placeholder
	secrets sync.Map          // name to value
	mu      sync.Mutex
	uses    []Use
}

func newCredWorld(t *testing.T) *credWorld {
	cw := &credWorld{ph: map[string]string{}}
	for name, v := range map[string]string{"gh-token": "ghp_REALTOKEN", "maps-key": "maps-REALKEY", "registry-password": "REALPASSWORD",
		"aws-secret-key": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYREALKEY", "aws-key-id": "AKIAREALKEYID"} {
		cw.secrets.Store(name, v)
	}
	cw.world = newWorld(t, "  replaced:\n    endpoints: [{host: x.test, port: 1}]\n", func(cfg *Config) {
		cfg.Secret = func(_ context.Context, name string) ([]byte, error) {
			v, ok := cw.secrets.Load(name)
			if !ok {
				return nil, errors.New("not found")
			}
			return []byte(v.(string)), nil
		}
		cfg.OnUse = func(u Use) { cw.mu.Lock(); cw.uses = append(cw.uses, u); cw.mu.Unlock() }
	})
	text := strings.NewReplacer("HTTPS", fmt.Sprint(cw.httpsPort), "HTTP", fmt.Sprint(cw.httpPort)).Replace(credentialsPolicy)
	pol, err := policy.Parse(text)
	if err != nil {
		t.Fatal(err)
	}
	var bindings []Binding
	for i, c := range pol.Credentials {
		b := Binding{Credential: c, Placeholder: fmt.Sprintf("%s%032d", secrets.PlaceholderPrefix, i)}
		cw.ph[c.Name] = b.Placeholder
		if c.Inject.SigV4 != nil {
			b.KeyIDPlaceholder = fmt.Sprintf("%s%032d", secrets.PlaceholderPrefix, 100+i)
			cw.ph[c.Name+"/key-id"] = b.KeyIDPlaceholder
		}
		bindings = append(bindings, b)
	}
	cw.proxy.SetRules(pol.Network)
	cw.proxy.SetBindings(bindings)
	return cw
}

// send sends a request through the proxy and returns its status and body.
func (cw *credWorld) send(req *http.Request) (int, string) {
	cw.t.Helper()
	resp, err := cw.client(cw.sandboxCA).Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func (cw *credWorld) request(method, rawURL, body string) *http.Request {
	cw.t.Helper()
	rawURL = strings.NewReplacer(":HTTPS", fmt.Sprintf(":%d", cw.httpsPort), ":HTTP", fmt.Sprintf(":%d", cw.httpPort)).Replace(rawURL)
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, rawURL, r)
	if err != nil {
		cw.t.Fatal(err)
	}
	return req
}

// lastSeen returns what the servers received last, and forgets it all.
func (cw *credWorld) lastSeen() *http.Request {
	cw.mu.Lock()
	defer cw.mu.Unlock()
	cw.world.mu.Lock()
	defer cw.world.mu.Unlock()
	if len(cw.seen) == 0 {
		return nil
	}
	last := cw.seen[len(cw.seen)-1]
	cw.seen = nil
	return last
}

// usesSoFar returns the ledger's entries so far and forgets them.
func (cw *credWorld) usesSoFar() []Use {
	cw.mu.Lock()
	defer cw.mu.Unlock()
	u := cw.uses
	cw.uses = nil
	return u
}

// A placeholder in the bound header reaches the endpoint as the value;
// a bound request without the header gets it in the format; the next
// request after an update carries the new value. Each is a use, with the
// server's status.
func TestHeaderInjectionAndRotation(t *testing.T) {
	cw := newCredWorld(t)
	req := cw.request("GET", "https://api.test:HTTPS/repos/a/b", "")
	req.Header.Set("Authorization", "Bearer "+cw.ph["github"])
	if status, body := cw.send(req); status != 200 {
		t.Fatalf("GET = %d %s", status, body)
	}
	if got := cw.lastSeen().Header.Get("Authorization"); got != "Bearer ghp_REALTOKEN" {
		t.Errorf("the server saw Authorization %q, want the value", got)
	}
	if status, body := cw.send(cw.request("POST", "https://api.test:HTTPS/repos/a/b", "x")); status != 200 {
		t.Fatalf("POST = %d %s", status, body)
	}
	if got := cw.lastSeen().Header.Get("Authorization"); got != "Bearer ghp_REALTOKEN" {
		t.Errorf("a request without the header: the server saw Authorization %q, want it added", got)
	}
	cw.secrets.Store("gh-token", "ghp_ROTATED")
	req = cw.request("GET", "https://api.test:HTTPS/repos/a/b", "")
	req.Header.Set("Authorization", "Bearer "+cw.ph["github"])
	cw.send(req)
	if got := cw.lastSeen().Header.Get("Authorization"); got != "Bearer ghp_ROTATED" {
		t.Errorf("after the update the server saw %q, want the new value", got)
	}
	uses := cw.usesSoFar()
	if len(uses) != 3 {
		t.Fatalf("uses = %+v, want 3", uses)
	}
	for _, u := range uses {
		if u.Verdict != sandbox.UseInjected || u.Credential != "github" || u.Secret != "gh-token" || u.Status != 200 || u.Host != "api.test" || u.Sandbox != "sb" {
			t.Errorf("use %+v", u)
		}
	}
}

// A bound endpoint that echoes what it received gives the sandbox the
// value masked, in its headers and its body, wherever the reads cut it.
func TestEchoedValueIsMasked(t *testing.T) {
	cw := newCredWorld(t)
	req := cw.request("GET", "https://api.test:HTTPS/repos/echo", "")
	req.Header.Set("Authorization", "Bearer "+cw.ph["github"])
	resp, err := cw.client(cw.sandboxCA).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if got := cw.lastSeen(); got == nil || got.Header.Get("Authorization") != "Bearer ghp_REALTOKEN" {
		t.Fatalf("the server did not receive the value")
	}
	if strings.Contains(string(body), "REALTOKEN") || strings.Contains(resp.Header.Get("X-Echo"), "REALTOKEN") {
		t.Errorf("the value came back to the sandbox: X-Echo %q, body %q…", resp.Header.Get("X-Echo"), body[:40])
	}
	if masked := "Bearer " + strings.Repeat("*", len("ghp_REALTOKEN")); resp.Header.Get("X-Echo") != masked ||
		!strings.HasPrefix(string(body), "you sent "+masked+";") || !strings.HasSuffix(string(body), masked) || len(body) != int(resp.ContentLength) && resp.ContentLength >= 0 {
		t.Errorf("the echo is not the masked value: X-Echo %q, body of %d bytes (length %d) from %q to %q", resp.Header.Get("X-Echo"),
			len(body), resp.ContentLength, body[:30], body[len(body)-30:])
	}
}

// The query parameter and Basic auth take the value in place of the
// placeholder.
func TestQueryAndBasicInjection(t *testing.T) {
	cw := newCredWorld(t)
	cw.send(cw.request("GET", "https://api.test:HTTPS/maps/tile?z=1&key="+cw.ph["maps"], ""))
	if got := cw.lastSeen(); got == nil || got.URL.Query().Get("key") != "maps-REALKEY" || got.URL.Query().Get("z") != "1" {
		t.Errorf("the server saw the query %v", got.URL.RawQuery)
	}
	req := cw.request("GET", "https://api.test:HTTPS/v2/_catalog", "")
	req.SetBasicAuth("robot", cw.ph["registry"])
	cw.send(req)
	if user, pass, _ := cw.lastSeen().BasicAuth(); user != "robot" || pass != "REALPASSWORD" {
		t.Errorf("the server saw Basic %q:%q", user, pass)
	}
	cw.send(cw.request("GET", "https://api.test:HTTPS/v2/_catalog", ""))
	if user, pass, _ := cw.lastSeen().BasicAuth(); user != "ci" || pass != "REALPASSWORD" {
		t.Errorf("without credentials the server saw Basic %q:%q, want the policy's user name", user, pass)
	}
}

// The placeholder anywhere the value may not go is refused with a 403 that
// names the credential, reported as denied and as a refused use, and
// never reaches a server.
func TestPlaceholderElsewhereIsRefused(t *testing.T) {
	cw := newCredWorld(t)
	ph := cw.ph["github"]
	withHeader := func(req *http.Request, name, value string) *http.Request { req.Header.Set(name, value); return req }
	for _, tc := range []struct {
		what string
		req  *http.Request
	}{
		{"an allowed host it is not bound to", withHeader(cw.request("GET", "https://other.test:HTTPS/repos/a", ""), "Authorization", "Bearer "+ph)},
		{"plain HTTP to an allowed host", withHeader(cw.request("GET", "http://other.test:HTTP/", ""), "Authorization", "Bearer "+ph)},
		{"its host on another path", withHeader(cw.request("GET", "https://api.test:HTTPS/user", ""), "Authorization", "Bearer "+ph)},
		{"its host with another method", withHeader(cw.request("DELETE", "https://api.test:HTTPS/repos/a", ""), "Authorization", "Bearer "+ph)},
		{"another header", withHeader(cw.request("GET", "https://api.test:HTTPS/repos/a", ""), "X-Debug", ph)},
		{"the path", cw.request("GET", "https://api.test:HTTPS/repos/"+ph, "")},
		{"another credential's query parameter", cw.request("GET", "https://api.test:HTTPS/maps/x?key="+ph, "")},
		{"a request body", cw.request("POST", "https://api.test:HTTPS/repos/a", `{"token":"`+ph+`"}`)},
		{"a request body to another host", cw.request("POST", "https://other.test:HTTPS/upload", "token="+ph)},
		{"a host no policy allows", withHeader(cw.request("GET", "http://denied.test:HTTP/", ""), "Authorization", ph)},
		{"the AWS secret key itself", withHeader(cw.request("GET", "https://s3.test:HTTPS/bucket", ""), "X-Leak", cw.ph["s3"])},
		{"another credential's beside its own, in its header", withHeader(cw.request("GET", "https://api.test:HTTPS/repos/a", ""), "Authorization", "Bearer "+ph+" "+cw.ph["maps"])},
	} {
		status, body := cw.send(tc.req)
		if status != http.StatusForbidden || !strings.Contains(body, ReasonMismatch) || !strings.Contains(body, "credentials.") {
			t.Errorf("%s: %d %q; want a 403 naming the credential and %s", tc.what, status, body, ReasonMismatch)
		}
		if seen := cw.lastSeen(); seen != nil {
			t.Errorf("%s: a server received the request", tc.what)
		}
		denied := false
		for _, d := range cw.decided() {
			denied = denied || d.Verdict == Denied && strings.HasPrefix(d.Reason, ReasonMismatch)
		}
		uses := cw.usesSoFar()
		if !denied || len(uses) != 1 || uses[0].Verdict != sandbox.UseRefused || !strings.HasPrefix(uses[0].Reason, ReasonMismatch) {
			t.Errorf("%s: denied decision %v, uses %+v; want one of each", tc.what, denied, uses)
		}
	}
}

// A body too long to read whole is cut at the placeholder: the server
// never gets it whole.
func TestPlaceholderInStreamedBodyIsCut(t *testing.T) {
	cw := newCredWorld(t)
	body := strings.Repeat("x", maxScannedBody) + cw.ph["github"] + strings.Repeat("y", 1000)
	req := cw.request("POST", "https://other.test:HTTPS/upload", "")
	req.Body = io.NopCloser(strings.NewReader(body)) // no length: streamed
	status, _ := cw.send(req)
	if status == 200 {
		t.Errorf("a streamed body with a placeholder: %d", status)
	}
	if seen := cw.lastSeen(); seen != nil {
		if got, _ := io.ReadAll(seen.Body); strings.Contains(string(got), cw.ph["github"]) || strings.HasSuffix(string(got), "y") {
			t.Errorf("the server received the body past the placeholder")
		}
	}
	if uses := cw.usesSoFar(); len(uses) != 1 || uses[0].Verdict != sandbox.UseRefused {
		t.Errorf("uses = %+v, want one refusal", uses)
	}
}

// A tunnel the proxy does not inspect is closed when the client sends a
// placeholder in it, before the server gets it.
func TestPlaceholderInPassThroughTunnelClosesIt(t *testing.T) {
	cw := newCredWorld(t)
	c, br, status := cw.connect(fmt.Sprintf("allowed.test:%d", cw.httpPort))
	if !strings.HasPrefix(status, "200") {
		t.Fatalf("CONNECT: %s", status)
	}
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: allowed.test\r\nAuthorization: Bearer %s\r\n\r\n", cw.ph["github"])
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if line, err := br.ReadString('\n'); err == nil {
		t.Errorf("the tunnel answered %q; want it closed", line)
	}
	if seen := cw.lastSeen(); seen != nil {
		t.Errorf("the server received the request")
	}
	if uses := cw.usesSoFar(); len(uses) != 1 || !strings.Contains(uses[0].Reason, "does not inspect") {
		t.Errorf("uses = %+v, want one refusal", uses)
	}
}

// A request signed with the placeholder keys reaches the server signed
// with the real ones, as the server's own check with the same signer
// finds; one that carries the key id's placeholder to an unbound host is
// refused, never signed.
func TestSigV4IsSignedAgain(t *testing.T) {
	cw := newCredWorld(t)
	sign := func(req *http.Request, body string) {
		sum := sha256.Sum256([]byte(body))
		req.Header.Set("X-Amz-Content-Sha256", hex.EncodeToString(sum[:]))
		creds := aws.Credentials{AccessKeyID: cw.ph["s3/key-id"], SecretAccessKey: cw.ph["s3"]}
		if err := v4.NewSigner().SignHTTP(context.Background(), creds, req, hex.EncodeToString(sum[:]), "s3", "us-east-1", time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	req := cw.request("PUT", "https://s3.test:HTTPS/bucket/key", "object")
	sign(req, "object")
	if status, body := cw.send(req); status != 200 {
		t.Fatalf("PUT = %d %s", status, body)
	}
	seen := cw.lastSeen()
	if err := testenv.CheckSigV4(seen, "AKIAREALKEYID", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYREALKEY"); err != nil {
		t.Errorf("the server's check: %v (Authorization %q)", err, seen.Header.Get("Authorization"))
	}
	if a := seen.Header.Get("Authorization"); strings.Contains(a, secrets.PlaceholderPrefix) {
		t.Errorf("a placeholder reached the server: %q", a)
	}
	req = cw.request("PUT", "https://other.test:HTTPS/bucket/key", "object")
	sign(req, "object")
	if status, body := cw.send(req); status != http.StatusForbidden || !strings.Contains(body, ReasonMismatch) {
		t.Errorf("a signed request to an unbound host: %d %q", status, body)
	}
	if seen := cw.lastSeen(); seen != nil {
		t.Errorf("the unbound host received the request (Authorization %q)", seen.Header.Get("Authorization"))
	}
}

// A secret gone (deleted) refuses the request with a reason that names
// it, and nothing is injected.
func TestMissingSecretRefuses(t *testing.T) {
	cw := newCredWorld(t)
	cw.secrets.Delete("gh-token")
	req := cw.request("GET", "https://api.test:HTTPS/repos/a", "")
	req.Header.Set("Authorization", "Bearer "+cw.ph["github"])
	status, body := cw.send(req)
	if status != http.StatusForbidden || !strings.Contains(body, `secret "gh-token"`) {
		t.Errorf("GET with the secret gone = %d %q", status, body)
	}
	if seen := cw.lastSeen(); seen != nil {
		t.Errorf("the server received the request")
	}
}

// The body is masked wherever its reads cut a value: here, a byte at a
// time.
func TestRedactingBodyAcrossReads(t *testing.T) {
	body := "a SECRETVALUE b SECRETVALUESECRETVALUE c SECRET"
	r := &redactingBody{ReadCloser: io.NopCloser(iotest.OneByteReader(strings.NewReader(body))), values: [][]byte{[]byte("SECRETVALUE")},
		keep: len("SECRETVALUE") - 1}
	got, err := io.ReadAll(r)
	if want := "a *********** b ********************** c SECRET"; err != nil || string(got) != want {
		t.Errorf("masked body %q, %v; want %q", got, err, want)
	}
}

// The scanner finds a placeholder wherever the reads cut it: a byte at a
// time, and across a long read.
func TestScannerAcrossReads(t *testing.T) {
	ph := secrets.PlaceholderPrefix + strings.Repeat("a", 32)
	bindings := []Binding{{Credential: policy.Credential{Name: "gh"}, Placeholder: ph}}
	for _, reads := range [][]string{
		strings.Split("xx"+ph+"yy", ""),
		{strings.Repeat("x", 40000) + ph[:5], ph[5:] + strings.Repeat("y", 40000)},
		{"x", ph[:20], ph[20:21], ph[21:]},
		{strings.Repeat("z", 100), ph, "z"},
	} {
		s := newScanner(bindings)
		found := false
		for _, r := range reads {
			if b, ok := s.scan([]byte(r)); ok && b.Name == "gh" {
				found = true
			}
		}
		if !found {
			t.Errorf("reads of %d pieces: the placeholder was not found", len(reads))
		}
	}
	s := newScanner(bindings)
	for _, r := range []string{ph[:31], strings.Repeat("q", 10), ph[31:]} {
		if _, ok := s.scan([]byte(r)); ok {
			t.Errorf("a placeholder broken by other bytes was found")
		}
	}
}
