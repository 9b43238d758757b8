package main

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/internal/testenv"
)

// A sandbox sees placeholders, never the values; the proxy puts a value
// on the wire only in requests to its credential's endpoints, signs AWS
// requests again, refuses the placeholder anywhere else; an update is used
// by the next request; the ledger keeps every use across a SIGKILL; and
// no file of the home, the sandbox or the gateway's log holds a value.
func TestCredentialsOnNative(t *testing.T) {
	testenv.RequireRoot(t)
	home := t.TempDir()
	console := freePort(t)
	credentialChecks(t, home, console, func() *gatewayProc { return nativeGateway(t, home, "--ui-listen", console) })
}

func TestCredentialsOnDocker(t *testing.T) {
	testenv.RequireDocker(t)
	testenv.RequireRoot(t)
	home, label := t.TempDir(), newLabel(t)
	credentialChecks(t, home, "", func() *gatewayProc { return dockerGateway(t, home, label) })
}

// randomValue is a secret value no file holds by chance.
func randomValue(prefix string) string {
	b := make([]byte, 16)
	rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

func credentialsPolicyFile(t *testing.T, srv egressServers) string {
	t.Helper()
	text := strings.NewReplacer("HTTPS", srv.httpsPort, "HTTP", srv.httpPort).Replace(`version: 1
network_policies:
  apis:
    endpoints:
      - {host: api.test, port: HTTPS, access: full, allowed_ips: [127.0.0.0/8]}
      - {host: other.test, port: HTTPS, access: full, allowed_ips: [127.0.0.0/8]}
      - {host: s3.test, port: HTTPS, access: full, allowed_ips: [127.0.0.0/8]}
      - {host: allowed.test, port: HTTP, allowed_ips: [127.0.0.0/8]}
credentials:
  github:
    secret: gh-token
    env: GITHUB_TOKEN
    inject: {header: Authorization, format: "Bearer {value}"}
    endpoints:
      - {host: api.test, port: HTTPS, paths: ["/repos/**"], methods: [GET]}
  s3:
    secret: aws-secret-key
    env: AWS_SECRET_ACCESS_KEY
    inject: {aws_sigv4: {access_key_id: aws-key-id, env: AWS_ACCESS_KEY_ID, region: us-east-1, service: s3}}
    endpoints: [{host: s3.test, port: HTTPS}]
`)
	path := filepath.Join(t.TempDir(), "credentials.yaml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// credentialChecks drives a gateway that start starts on home; console,
// when set, is its --ui-listen address, whose sandbox page must list the
// uses too.
func credentialChecks(t *testing.T, home, console string, start func() *gatewayProc) {
	srv := startEgressServers(t)
	g := start()
	token, keyID, key := randomValue("ghp_"), randomValue("AKIA"), randomValue("aws/")
	for name, value := range map[string]string{"gh-token": token, "aws-key-id": keyID, "aws-secret-key": key} {
		if out, errOut, code := corralRun(t, nil, strings.NewReader(value), "--home", home, "secret", "create", name); code != 0 {
			t.Fatalf("secret create %s: %s%s", name, out, errOut)
		}
	}
	mustCorral(t, home, "sandbox", "create", "--name", "cb", "--policy", credentialsPolicyFile(t, srv),
		"--add-host", "api.test:127.0.0.1", "--add-host", "other.test:127.0.0.1", "--add-host", "s3.test:127.0.0.1",
		"--add-host", "allowed.test:127.0.0.1", "--", "sleep", "1d")
	putProgram(t, home, "cb", buildTestProgram(t, "credprobe"), "credprobe")
	run := func(args ...string) string {
		out, errOut, _ := corral(t, home, append([]string{"sandbox", "exec", "cb", "--", "/sandbox/credprobe"}, args...)...)
		return strings.TrimSpace(out + errOut)
	}
	api := "https://api.test:" + srv.httpsPort

	ph := strings.TrimSpace(mustCorral(t, home, "sandbox", "exec", "cb", "--", "sh", "-c", "echo $GITHUB_TOKEN"))
	if !strings.HasPrefix(ph, "corral_ph_") || strings.Contains(ph, token) {
		t.Fatalf("$GITHUB_TOKEN in the sandbox is %q; want a placeholder", ph)
	}
	if got := run("header", "GET", api+"/repos/a/b"); !strings.HasPrefix(got, "200 hello GET") {
		t.Fatalf("GET of the bound endpoint: %q", got)
	}
	if reqs := srv.received.take(); len(reqs) != 1 || reqs[0].Header.Get("Authorization") != "Bearer "+token {
		t.Fatalf("the bound endpoint received %d requests, the last with Authorization %q; want the value", len(reqs), lastAuthorization(reqs))
	}

	// Anywhere else, the placeholder is refused and never becomes the value.
	for _, tc := range []struct{ what, want string }{
		{run("header", "GET", "https://other.test:"+srv.httpsPort+"/repos/a"), "403 "},
		{run("header", "GET", api+"/user"), "403 "},
		{run("header", "POST", api+"/repos/a"), "403 "},
		{run("body", api+"/repos/a"), "403 "},
		{run("tunnel", "allowed.test:"+srv.httpPort), "closed"},
	} {
		if !strings.HasPrefix(tc.what, tc.want) || tc.want == "403 " && !strings.Contains(tc.what, "credential_endpoint_mismatch") {
			t.Errorf("a placeholder where the value may not go: %q; want %q and credential_endpoint_mismatch", tc.what, tc.want)
		}
	}
	for _, r := range srv.received.take() {
		if held := requestText(r); strings.Contains(held, token) {
			t.Errorf("a server received the value in %s %s", r.Method, r.URL)
		}
	}
	mismatches := 0
	for _, line := range strings.Split(strings.TrimSpace(mustCorral(t, home, "sandbox", "denials", "cb", "-o", "json")), "\n") {
		var d map[string]any
		if json.Unmarshal([]byte(line), &d) == nil && strings.HasPrefix(fmt.Sprint(d["reason"]), "credential_endpoint_mismatch") {
			mismatches++
		}
	}
	if mismatches < 5 {
		t.Errorf("denials list %d credential_endpoint_mismatch refusals; want the 5", mismatches)
	}
	if console != "" { // the console's page of the sandbox lists them: the injection and the refusals
		page := consoleGet(t, home, console, "/api/sandboxes/cb/credentials")
		if !strings.Contains(page, `"verdict":"injected"`) || strings.Count(page, `"verdict":"refused"`) < 4 || strings.Contains(page, token) {
			t.Errorf("the console's credential uses of cb:\n%s", page)
		}
	}

	// AWS: signed again with the real keys for the bound host only.
	if got := run("sigv4", "https://s3.test:"+srv.httpsPort+"/bucket/key"); !strings.HasPrefix(got, "200 ") {
		t.Errorf("a SigV4 PUT to the bound host: %q", got)
	}
	if reqs := srv.received.take(); len(reqs) != 1 {
		t.Errorf("the bound host received %d requests; want 1", len(reqs))
	} else if err := testenv.CheckSigV4(reqs[0], keyID, key); err != nil {
		t.Errorf("the signature the server received: %v", err)
	}
	if got := run("sigv4", "https://other.test:"+srv.httpsPort+"/bucket/key"); !strings.HasPrefix(got, "403 ") {
		t.Errorf("a SigV4 PUT to an unbound host: %q; want 403", got)
	}
	if reqs := srv.received.take(); len(reqs) != 0 {
		t.Errorf("the unbound host received %d requests", len(reqs))
	}

	// An update is used by the next request, in the same incarnation.
	generation := getJSON(t, home, "cb")["generation"]
	token2 := randomValue("ghp_")
	if out, errOut, code := corralRun(t, nil, strings.NewReader(token2), "--home", home, "secret", "update", "gh-token"); code != 0 {
		t.Fatalf("secret update: %s%s", out, errOut)
	}
	run("header", "GET", api+"/repos/a/b")
	if reqs := srv.received.take(); lastAuthorization(reqs) != "Bearer "+token2 {
		t.Errorf("after the update the server received Authorization %q; want the new value", lastAuthorization(reqs))
	}
	if now := getJSON(t, home, "cb")["generation"]; now != generation {
		t.Errorf("generation %v after the update, %v before", now, generation)
	}
	if out := mustCorral(t, home, "secret", "get", "gh-token"); !strings.Contains(out, "bound by: cb") || !strings.Contains(out, "last use:") || !strings.Contains(out, "injected by cb") {
		t.Errorf("secret get does not say what binds it and its last use:\n%s", out)
	}
	if _, errOut, code := corral(t, home, "secret", "delete", "gh-token"); code == 0 || !strings.Contains(errOut, "running sandboxes (cb)") {
		t.Errorf("secret delete while cb binds it: exit %d, %q; want it refused, naming cb", code, errOut)
	}

	// The ledger survives a SIGKILL of the gateway; so does every binding.
	uses := usage(t, home, "gh-token")
	injected, refused := 0, 0
	for _, u := range uses {
		switch u["verdict"] {
		case "injected":
			injected++
			if u["status"] != 200.0 || u["sandbox"] != "cb" || u["credential"] != "github" {
				t.Errorf("use %v", u)
			}
		case "refused":
			refused++
		}
	}
	if injected != 2 || refused != 5 {
		t.Errorf("the ledger of gh-token: %d injected, %d refused; want 2 and 5: %v", injected, refused, uses)
	}
	mustCorral(t, home, "sandbox", "logs", "cb")
	logs := g.logs.String()
	g.signal(syscall.SIGKILL)
	g.exitCode(10 * time.Second)
	g = start()
	if again := usage(t, home, "gh-token"); len(again) != len(uses) {
		t.Errorf("after a SIGKILL the ledger has %d entries, %d before", len(again), len(uses))
	}
	if got := run("header", "GET", api+"/repos/a/b"); !strings.HasPrefix(got, "200 ") {
		t.Errorf("GET of the bound endpoint after the restart: %q", got)
	}
	if reqs := srv.received.take(); lastAuthorization(reqs) != "Bearer "+token2 {
		t.Errorf("after the restart the server received Authorization %q; want the value", lastAuthorization(reqs))
	}

	// Nowhere in the sandbox, the home or the logs.
	values := []string{token, token2, keyID, key}
	inside := mustCorral(t, home, "sandbox", "exec", "cb", "--", "sh", "-c",
		"cat /proc/[0-9]*/environ | tr '\\0' '\\n'; grep -rlF -e "+token+" -e "+token2+" -e "+keyID+" /sandbox /tmp /etc /.corral 2>/dev/null; true")
	if !strings.Contains(inside, "GITHUB_TOKEN=corral_ph_") {
		t.Errorf("the sandbox's processes' environments lack the placeholder:\n%s", inside)
	}
	for _, v := range values {
		if strings.Contains(inside, v) {
			t.Errorf("a value is in the sandbox's environments or files:\n%s", inside)
		}
	}
	noValues(t, home, logs+g.logs.String(), values)

	// delete --force cuts the binding at once.
	if out := mustCorral(t, home, "secret", "delete", "gh-token", "--force"); !strings.Contains(out, "bindings cut: cb") {
		t.Errorf("secret delete --force: %q", out)
	}
	if got := run("header", "GET", api+"/repos/a/b"); !strings.HasPrefix(got, "403 ") || !strings.Contains(got, "gh-token") {
		t.Errorf("GET right after secret delete --force: %q; want 403 naming the secret", got)
	}
	if reqs := srv.received.take(); len(reqs) != 0 {
		t.Errorf("after delete --force the server received Authorization %q", lastAuthorization(reqs))
	}
	mustCorral(t, home, "sandbox", "delete", "cb")
	noValues(t, home, g.logs.String(), values)
}

// usage returns a secret's ledger, from secret usage -o json.
func usage(t *testing.T, home, secret string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(mustCorral(t, home, "secret", "usage", secret, "-o", "json")), "\n") {
		var u map[string]any
		if err := json.Unmarshal([]byte(line), &u); err != nil {
			t.Fatalf("secret usage -o json line %q: %v", line, err)
		}
		out = append(out, u)
	}
	return out
}

func lastAuthorization(reqs []*http.Request) string {
	if len(reqs) == 0 {
		return "(no request)"
	}
	return reqs[len(reqs)-1].Header.Get("Authorization")
}

// requestText is what a request carried: its line, headers and body.
func requestText(r *http.Request) string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s %s\n", r.Method, r.URL)
	r.Header.Write(&b)
	body, _ := io.ReadAll(r.Body)
	b.Write(body)
	return b.String()
}

// noValues fails if a file under home or the logs hold a value, as it is
// or in base64 (at each of its three alignments).
func noValues(t *testing.T, home, logs string, values []string) {
	t.Helper()
	var needles []string
	for _, v := range values {
		needles = append(needles, v)
		for pad := range 3 {
			enc := base64.StdEncoding.EncodeToString([]byte(strings.Repeat("x", pad) + v))
			needles = append(needles, enc[4:len(enc)-4])
		}
	}
	check := func(where string, data []byte) {
		for _, n := range needles {
			if bytes.Contains(data, []byte(n)) {
				t.Errorf("%s holds a secret's value (or its base64)", where)
				return
			}
		}
	}
	check("the gateway's log", []byte(logs))
	filepath.WalkDir(home, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		if data, err := os.ReadFile(path); err == nil {
			check(path, data)
		}
		return nil
	})
}
