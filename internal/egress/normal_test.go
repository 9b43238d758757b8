package egress

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/internal/policy"
)

// rawRequest sends head (a request line and headers, without the blank
// line) through the proxy on a connection of its own, as a client that
// does not normalise its paths would, and returns the status and body.
func (w *world) rawRequest(head string) (int, string) {
	w.t.Helper()
	c, err := net.Dial("tcp", w.proxyURL.Host)
	if err != nil {
		w.t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second)) // a guard against a hang
	fmt.Fprintf(c, "%s\r\n\r\n", head)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		w.t.Fatalf("%q: %v", head, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// The rules decide the path the server will read: decoded once, and a
// path the server could read as another (dot segments, encoded slashes,
// "//", ";", double encoding) is refused; a deny rule's path matches
// without case; a method override is decided as a method; a protocol
// upgrade on an inspected endpoint needs allow_upgrade.
func TestRulesDecideTheNormalPath(t *testing.T) {
	w := newWorld(t, `
  local:
    endpoints:
      - host: allowed.test
        ports: [HTTP]
        access: read-only
        deny_rules: [{deny: {method: "*", path: "/admin/**"}}]
        allowed_ips: [127.0.0.0/8]
`, nil)
	req := func(method, path string, headers ...string) string {
		host := fmt.Sprintf("allowed.test:%d", w.httpPort)
		return strings.Join(append([]string{method + " http://" + host + path + " HTTP/1.1", "Host: " + host}, headers...), "\r\n")
	}
	for _, path := range []string{
		"/%61dmin/x", "/a/%2e%2e/admin/x", "/a/%2E%2E/admin/x", "/a/../admin/x", "/./admin/x", "//admin/x",
		"/ADMIN/x", "/Admin", "/admin;x", "/admin;x/y", "/%2561dmin/x", "/admin%2fx", "/x%2F..%2Fadmin", "/x%5c..%5cadmin",
		"/admin%00/x", "/%41DMIN/x",
	} {
		status, body := w.rawRequest(req("GET", path))
		if status != http.StatusForbidden {
			t.Errorf("GET %s: %d %q; want 403", path, status, body)
		}
	}
	for _, path := range []string{"/public/x", "/%70ublic/x", "/public/", "/administrator"} {
		if status, body := w.rawRequest(req("GET", path)); status != 200 {
			t.Errorf("GET %s: %d %q; want 200", path, status, body)
		}
	}
	for _, h := range []string{"X-HTTP-Method-Override: DELETE", "X-HTTP-Method: delete", "X-Method-Override: PUT"} {
		status, body := w.rawRequest(req("GET", "/public/x", h))
		if status != http.StatusForbidden || !strings.Contains(body, "method override") {
			t.Errorf("GET with %s on a read-only endpoint: %d %q; want 403 for the override", h, status, body)
		}
	}
	if status, body := w.rawRequest(req("GET", "/public/x?_method=DELETE")); status != http.StatusForbidden {
		t.Errorf("GET ?_method=DELETE on a read-only endpoint: %d %q; want 403", status, body)
	}
	upgrade := req("GET", "/public/ws", "Connection: Upgrade", "Upgrade: websocket", "Sec-WebSocket-Version: 13", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==")
	if status, body := w.rawRequest(upgrade); status != http.StatusForbidden || !strings.Contains(body, "allow_upgrade") {
		t.Errorf("a WebSocket upgrade on an inspected endpoint: %d %q; want 403 naming allow_upgrade", status, body)
	}
	w.proxy.SetRules(w.rules(`
  local:
    endpoints:
      - {host: allowed.test, ports: [HTTP], access: read-only, allow_upgrade: true, allowed_ips: [127.0.0.0/8]}
`))
	if status, body := w.rawRequest(upgrade); status == http.StatusForbidden {
		t.Errorf("a WebSocket upgrade with allow_upgrade: %d %q; want it sent on", status, body)
	}
}

func TestNormalPath(t *testing.T) {
	for raw, want := range map[string]string{"": "/", "/": "/", "/a/b/": "/a/b/", "/%61/b": "/a/b", "/a%20b": "/a b", "/caf%C3%A9": "/café"} {
		if got, err := normalPath(raw); err != nil || got != want {
			t.Errorf("normalPath(%q) = %q, %v; want %q", raw, got, err, want)
		}
	}
	for _, raw := range []string{"a", "/%zz", "/a//b", "/a/%2e/b", "/a%2F", "/a;b", "/%2541", "/a\\b", "/a%0a"} {
		if got, err := normalPath(raw); err == nil {
			t.Errorf("normalPath(%q) = %q; want an error", raw, got)
		}
	}
}

// A pass-through tunnel to a name refuses a ClientHello without a server
// name: the server would pick the certificate, and the name, itself.
func TestPassThroughRefusesAClientHelloWithoutName(t *testing.T) {
	w := newWorld(t, `
  local:
    endpoints:
      - {host: allowed.test, ports: [HTTPS], allowed_ips: [127.0.0.0/8]}
`, nil)
	tun, br, status := w.connect(fmt.Sprintf("allowed.test:%d", w.httpsPort))
	if status != "200 " {
		t.Fatalf("CONNECT = %q", status)
	}
	if err := tls.Client(&bufConn{Conn: tun, r: br}, &tls.Config{InsecureSkipVerify: true}).Handshake(); err == nil {
		t.Error("a ClientHello without a server name passed a tunnel to allowed.test")
	}
	d := w.decided()
	if len(d) == 0 || d[len(d)-1].Verdict != Denied || !strings.Contains(d[len(d)-1].Reason, "without a server name") {
		t.Errorf("decisions = %+v; want the ClientHello without a name refused", d)
	}
}

func TestAllowUpgradeNeedsAnInspectedEndpoint(t *testing.T) {
	_, err := policy.ParseNetwork("version: 1\nnetwork_policies:\n  a:\n    endpoints:\n      - {host: a.test, port: 443, allow_upgrade: true}\n")
	if err == nil || !strings.Contains(err.Error(), "allow_upgrade") || !strings.Contains(err.Error(), "line 5") {
		t.Errorf("allow_upgrade on a pass-through endpoint: %v; want an error on line 5 naming it", err)
	}
}
