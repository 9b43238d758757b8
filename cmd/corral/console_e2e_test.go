package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
	"github.com/corral-sandbox/corral/internal/testenv"
	"github.com/corral-sandbox/corral/internal/tlsauth"
)

// The web console in Debian's Chromium (test/console, playwright-core from
// its lockfile): a sandbox made from the form becomes ready on the page
// without a reload, its journal shows, it stops and is deleted (with the
// confirmation of --force); a bad policy is refused with its line; what
// a sandbox wrote is shown as text; a viewer sees no action and the API
// refuses one forced; 1,000 sandboxes render in under a second and stay
// live; an admin switches tenant and a member may not. Screenshots go to docs/console when CORRAL_CONSOLE_SHOTS=1.
func TestConsoleInABrowser(t *testing.T) {
	dir := consoleTests(t)
	home := t.TempDir()
	addr := freePort(t)
	startGateway(t, home, "--ui-listen", addr)
	token := lastLine(mustCorral(t, home, "token", "create", "--tenant", "default", "--role", "member", "--name", "browser"))
	viewer := lastLine(mustCorral(t, home, "token", "create", "--tenant", "default", "--role", "viewer", "--name", "onlooker"))
	admin := lastLine(mustCorral(t, home, "token", "create", "--tenant", "default", "--role", "admin", "--name", "operator"))

	c := api(t, home)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for i := range 1000 {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if _, err := c.CreateSandbox(context.Background(), &corralv1.CreateSandboxRequest{Name: fmt.Sprintf("many-%04d", i),
				Spec: &corralv1.SandboxSpec{Command: []string{"sleep", "1d"}}}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()

	runNodeTest(t, dir, "console.test.mjs", 6, "CORRAL_HOME="+home, "CORRAL_CONSOLE_URL=http://"+addr,
		"CORRAL_TOKEN="+token, "CORRAL_VIEWER_TOKEN="+viewer, "CORRAL_ADMIN_TOKEN="+admin)
}

// The console's terminal, on a native gateway, in Debian's Chromium: echo
// hi prints hi on the screen, a narrower page resizes the TTY, and the
// exit code shows.
func TestConsoleTerminalInABrowser(t *testing.T) {
	testenv.RequireRoot(t)
	dir := consoleTests(t)
	home := t.TempDir()
	addr := freePort(t)
	nativeGateway(t, home, "--ui-listen", addr)
	token := lastLine(mustCorral(t, home, "token", "create", "--tenant", "default", "--role", "member", "--name", "terminal"))
	mustCorral(t, home, "sandbox", "create", "--name", "shell", "--", "sleep", "1d")
	runNodeTest(t, dir, "terminal.test.mjs", 1, "CORRAL_CONSOLE_URL=http://"+addr, "CORRAL_TOKEN="+token, "CORRAL_SANDBOX=shell")
	mustCorral(t, home, "sandbox", "delete", "shell")
}

// consoleTests is test/console, or a skip (a failure under
// CORRAL_REQUIRE_NODE=1) when Node.js, its packages or Chromium are not here.
func consoleTests(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(testenv.ModuleRoot(), "test", "console")
	if _, err := exec.LookPath("node"); err != nil {
		requireNode(t, "needs Node.js: "+err.Error())
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "playwright-core")); err != nil {
		requireNode(t, "needs playwright-core: run npm ci in test/console")
	}
	if _, err := os.Stat("/usr/bin/chromium"); err != nil {
		requireNode(t, "needs Debian's chromium: "+err.Error())
	}
	return dir
}

// runNodeTest runs one file of node tests in dir with env, requires its
// pass count, and logs the lines it printed of its figures.
func runNodeTest(t *testing.T, dir, file string, passes int, env ...string) {
	t.Helper()
	cmd := exec.Command("node", "--test", "--test-concurrency=1", file)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "CORRAL_BIN="+bin), env...)
	if os.Getenv("CORRAL_CONSOLE_SHOTS") == "1" {
		cmd.Env = append(cmd.Env, "CORRAL_SHOTS="+filepath.Join(testenv.ModuleRoot(), "docs", "console"))
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node --test %s: %v\n%s", file, err, out)
	}
	if !strings.Contains(string(out), fmt.Sprintf("# pass %d\n", passes)) {
		t.Fatalf("node --test %s passed, but not its %d tests:\n%s", file, passes, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "rendered") {
			t.Log(strings.TrimLeft(strings.TrimSpace(line), "#\\ "))
		}
	}
}

// The console refuses what a page of another site sends with its
// visitor's cookie, and answers with headers that forbid inline scripts
// and framing; without a session it sends the browser to log in.
func TestConsoleRefusesOtherSites(t *testing.T) {
	home := t.TempDir()
	addr := freePort(t)
	startGateway(t, home, "--ui-listen", addr)
	token := lastLine(mustCorral(t, home, "token", "create", "--tenant", "default", "--role", "member", "--name", "browser"))
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }, Timeout: 10 * time.Second}

	resp, err := noRedirect.Get("http://" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	csp := resp.Header.Get("Content-Security-Policy")
	scripts := ""
	for _, d := range strings.Split(csp, ";") {
		if d = strings.TrimSpace(d); strings.HasPrefix(d, "script-src ") {
			scripts = d
		}
	}
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/login" || scripts != "script-src 'self'" ||
		resp.Header.Get("X-Frame-Options") != "DENY" {
		t.Errorf("/ without a session: %s, Location %q, CSP %q", resp.Status, resp.Header.Get("Location"), csp)
	}
	login, err := noRedirect.PostForm("http://"+addr+"/login", map[string][]string{"token": {token}})
	if err != nil {
		t.Fatal(err)
	}
	login.Body.Close()
	var cookie *http.Cookie
	for _, ck := range login.Cookies() {
		if ck.Name == "corral_console" {
			cookie = ck
		}
	}
	if cookie == nil || !cookie.HttpOnly || cookie.SameSite != http.SameSiteStrictMode {
		t.Fatalf("the session's cookie: %+v", cookie)
	}
	post := func(origin, site, csrf string) int {
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/api/sandboxes", strings.NewReader(`{"name":"forged"}`))
		req.AddCookie(cookie)
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		if site != "" {
			req.Header.Set("Sec-Fetch-Site", site)
		}
		if csrf != "" {
			req.Header.Set("X-CSRF-Token", csrf)
		}
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post("https://evil.example", "cross-site", ""); code != http.StatusForbidden {
		t.Errorf("a cross-site POST with the cookie: %d, want 403", code)
	}
	if code := post("", "", ""); code != http.StatusForbidden {
		t.Errorf("a same-site POST without the CSRF token: %d, want 403", code)
	}
	if code := post("", "", "not-the-token"); code != http.StatusForbidden {
		t.Errorf("a POST with another CSRF token: %d, want 403", code)
	}
	if _, errOut, code := corral(t, home, "sandbox", "get", "forged"); code == 0 || !strings.Contains(errOut, "not found") {
		t.Errorf("a forged create made a sandbox: %d %q", code, errOut)
	}
	// a WebSocket of another origin, with the cookie and the CSRF token
	mustCorral(t, home, "sandbox", "create", "--name", "target")
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/api/session", nil)
	req.AddCookie(cookie)
	sess, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var session struct{ CSRF string }
	_ = json.NewDecoder(sess.Body).Decode(&session)
	sess.Body.Close()
	for _, tc := range []struct{ origin, csrf string }{{"https://evil.example", session.CSRF}, {"http://" + addr, "not-the-token"}} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		h := http.Header{"Origin": {tc.origin}}
		h.Add("Cookie", cookie.Name+"="+cookie.Value)
		conn, resp, err := websocket.Dial(ctx, "ws://"+addr+"/api/sandboxes/target/terminal?csrf="+tc.csrf, &websocket.DialOptions{HTTPHeader: h})
		cancel()
		if err == nil {
			conn.CloseNow()
		}
		if err == nil || resp == nil || resp.StatusCode != http.StatusForbidden {
			t.Errorf("a terminal's WebSocket from %s with CSRF %q: %v, want 403", tc.origin, tc.csrf, err)
		}
	}
	mustCorral(t, home, "token", "revoke", "browser")
	resp, err = func() (*http.Response, error) {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/api/session", nil)
		req.AddCookie(cookie)
		return noRedirect.Do(req)
	}()
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a session whose token was revoked: %s, want 401", resp.Status)
	}

	bad := launch(t, t.TempDir(), "--ui-listen", "0.0.0.0:7080")
	if code := bad.exitCode(30 * time.Second); code == 0 || !strings.Contains(bad.logs.String(), "want a loopback address") {
		t.Errorf("--ui-listen on every address: exit %d\n%s", code, bad.logs.String())
	}
}

// On the TLS listener the console takes the browser's client certificate
// as its login: the session it makes is the certificate's, and a request
// that brings the cookie over a connection without that certificate is
// not served.
func TestConsoleOverMutualTLS(t *testing.T) {
	home, certs := t.TempDir(), t.TempDir()
	addr := freePort(t)
	startGateway(t, home, "--listen", addr)
	mustCorral(t, home, "gateway", "client-cert", "carol", "--role", "member", "--out", certs)
	cfg, err := tlsauth.ClientConfig(filepath.Join(certs, "ca.crt"), filepath.Join(certs, "carol.crt"), filepath.Join(certs, "carol.key"))
	if err != nil {
		t.Fatal(err)
	}
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Jar: jar, Timeout: 10 * time.Second}
	resp, err := browser.Get("https://" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(page), "/static/app.js") {
		t.Fatalf("the console with a client certificate: %s\n%s", resp.Status, page)
	}
	resp, err = browser.Get("https://" + addr + "/api/session")
	if err != nil {
		t.Fatal(err)
	}
	var session struct {
		Caller, CSRF string
	}
	_ = json.NewDecoder(resp.Body).Decode(&session)
	resp.Body.Close()
	if session.Caller != "client certificate carol" || session.CSRF == "" {
		t.Fatalf("the session over mutual TLS: %+v", session)
	}
	req, _ := http.NewRequest(http.MethodPost, "https://"+addr+"/api/sandboxes", strings.NewReader(`{"name":"by-carol"}`))
	req.Header.Set("X-CSRF-Token", session.CSRF)
	if resp, err = browser.Do(req); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("a create over mutual TLS: %s", resp.Status)
	}
	if out := mustCorral(t, home, "sandbox", "history", "by-carol"); !strings.Contains(out, "client certificate carol") {
		t.Errorf("the journal of a create from the console: %s", out)
	}
	// the cookie, without the certificate
	bare := &tls.Config{RootCAs: cfg.RootCAs, ServerName: cfg.ServerName, MinVersion: tls.VersionTLS13}
	thief := &http.Client{Transport: &http.Transport{TLSClientConfig: bare}, Jar: jar, Timeout: 10 * time.Second}
	if resp, err = thief.Get("https://" + addr + "/api/session"); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("the session's cookie without its certificate: %s, want 401", resp.Status)
	}
}

// consoleGet logs in to the console at addr with a new member token of
// home's gateway and returns what GET path answers.
func consoleGet(t *testing.T, home, addr, path string) string {
	t.Helper()
	token := lastLine(mustCorral(t, home, "token", "create", "--tenant", "default", "--role", "member"))
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Timeout: 30 * time.Second}
	resp, err := c.PostForm("http://"+addr+"/login", map[string][]string{"token": {token}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp, err = c.Get("http://" + addr + path); err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s of the console: %s %s", path, resp.Status, body)
	}
	return string(body)
}
