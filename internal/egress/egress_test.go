package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/internal/policy"
)

// world is a proxy on loopback and the servers it leads to: an HTTP and an
// HTTPS server on 127.0.0.1, the HTTPS one with a certificate of its own
// CA for every name it is asked for.
type world struct {
	t                   *testing.T
	proxy               *Proxy
	proxyURL            *url.URL
	httpPort, httpsPort int
	sandboxCA, serverCA *CA

	mu        sync.Mutex
	decisions []Decision
	seen      []*http.Request // what the servers received, bodies read into Body
}

// loopback are the pins every test uses: these names are 127.0.0.1.
var loopback = map[string][]netip.Addr{}

func init() {
	for _, name := range []string{"Allowed.Test", "denied.test.", "a.wild.test", "wild.test", "a.b.wild.test", "api.test", "other.test", "s3.test"} {
		loopback[name] = []netip.Addr{netip.MustParseAddr("127.0.0.1")}
	}
}

func newWorld(t *testing.T, rulesText string, edit func(*Config)) *world {
	t.Helper()
	w := &world{t: t}
	var err error
	if w.sandboxCA, err = NewCA("sandbox test CA"); err != nil {
		t.Fatal(err)
	}
	if w.serverCA, err = NewCA("server test CA"); err != nil {
		t.Fatal(err)
	}
	handler := http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hang" { // a response that lasts until the request is cut
			rw.Write(make([]byte, 64<<10)) // past every buffer on the way
			rw.(http.Flusher).Flush()
			<-r.Context().Done()
			return
		}
		body, _ := io.ReadAll(r.Body)
		seen := r.Clone(context.Background())
		seen.Body = io.NopCloser(strings.NewReader(string(body)))
		w.mu.Lock()
		w.seen = append(w.seen, seen)
		w.mu.Unlock()
		if strings.HasSuffix(r.URL.Path, "/echo") { // a server that hands back what it received
			auth := r.Header.Get("Authorization")
			rw.Header().Set("X-Echo", auth)
			fmt.Fprintf(rw, "you sent %s;%s%s", auth, strings.Repeat("-", 40<<10-5), auth)
			return
		}
		fmt.Fprintf(rw, "hello %s %s %s", r.Method, r.URL.Path, body)
	})
	plain := httptest.NewServer(handler)
	t.Cleanup(plain.Close)
	secure := httptest.NewUnstartedServer(handler)
	secure.TLS = &tls.Config{GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
		return w.serverCA.Leaf(hello.ServerName)
	}}
	secure.StartTLS()
	t.Cleanup(secure.Close)
	w.httpPort, w.httpsPort = port(t, plain.URL), port(t, secure.URL)

	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(w.serverCA.CertPEM())
	cfg := Config{Sandbox: "sb", Rules: w.rules(rulesText), Hosts: loopback, CA: w.sandboxCA, RootCAs: roots,
		OnDecision: func(d Decision) { w.mu.Lock(); w.decisions = append(w.decisions, d); w.mu.Unlock() }}
	if edit != nil {
		edit(&cfg)
	}
	if w.proxy, err = New(cfg); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- w.proxy.Serve(l) }()
	t.Cleanup(func() {
		w.proxy.Close()
		if err := <-served; err != nil {
			t.Errorf("Serve = %v after Close; want nil", err)
		}
	})
	w.proxyURL = &url.URL{Scheme: "http", Host: l.Addr().String()}
	return w
}

func port(t *testing.T, rawURL string) int {
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	var p int
	fmt.Sscan(u.Port(), &p)
	return p
}

// rules parses network_policies, with HTTP and HTTPS standing for the
// servers' ports.
func (w *world) rules(text string) []policy.NetworkPolicy {
	w.t.Helper()
	text = strings.NewReplacer("HTTPS", fmt.Sprint(w.httpsPort), "HTTP", fmt.Sprint(w.httpPort)).Replace(text)
	rules, err := policy.ParseNetwork("version: 1\nnetwork_policies:\n" + text)
	if err != nil {
		w.t.Fatalf("%v in\n%s", err, text)
	}
	return rules
}

// client goes through the proxy and trusts only ca.
func (w *world) client(ca *CA) *http.Client {
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.CertPEM())
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(w.proxyURL),
		TLSClientConfig: &tls.Config{RootCAs: roots}}}
}

// do sends method to https or http://host:port/path through the proxy and
// returns the status and body; an error is status 0 and its text.
func (w *world) do(c *http.Client, method, rawURL string) (int, string) {
	w.t.Helper()
	rawURL = strings.NewReplacer(":HTTPS", fmt.Sprintf(":%d", w.httpsPort), ":HTTP", fmt.Sprintf(":%d", w.httpPort)).Replace(rawURL)
	req, err := http.NewRequest(method, rawURL, strings.NewReader("body"))
	if err != nil {
		w.t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func (w *world) expect(c *http.Client, method, rawURL string, status int, body string) {
	w.t.Helper()
	got, text := w.do(c, method, rawURL)
	if got != status || !strings.Contains(text, body) {
		w.t.Errorf("%s %s = %d %q; want %d and %q", method, rawURL, got, text, status, body)
	}
}

// decided returns the decisions so far and forgets them.
func (w *world) decided() []Decision {
	w.mu.Lock()
	defer w.mu.Unlock()
	d := w.decisions
	w.decisions = nil
	return d
}

// connect opens a CONNECT tunnel by hand and returns the connection and
// the proxy's status line.
func (w *world) connect(target string) (net.Conn, *bufio.Reader, string) {
	w.t.Helper()
	c, err := net.Dial("tcp", w.proxyURL.Host)
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		w.t.Fatalf("CONNECT %s: %v", target, err)
	}
	var body []byte
	if resp.StatusCode != http.StatusOK { // a 200's body is the tunnel
		body, _ = io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
	}
	return c, br, fmt.Sprintf("%d %s", resp.StatusCode, body)
}

const readOnlyRules = `
  local:
    endpoints:
      - host: allowed.test
        ports: [HTTP, HTTPS]
        access: read-only
        allowed_ips: [127.0.0.0/8]
`

func TestReadOnlyOverHTTPAndHTTPSWithVerification(t *testing.T) {
	w := newWorld(t, readOnlyRules, nil)
	c := w.client(w.sandboxCA) // trusts only the sandbox's CA: every HTTPS answer is the proxy's
	w.expect(c, "GET", "http://allowed.test:HTTP/x", 200, "hello GET /x")
	w.expect(c, "GET", "https://allowed.test:HTTPS/y", 200, "hello GET /y")
	w.expect(c, "HEAD", "https://allowed.test:HTTPS/y", 200, "")
	if d := w.decided(); len(d) != 0 {
		t.Errorf("allowed requests reported: %+v", d)
	}
	const why = "network_policies.local.endpoints[0].access (read-only) does not allow POST"
	w.expect(c, "POST", "http://allowed.test:HTTP/x", 403, why)
	w.expect(c, "POST", "https://allowed.test:HTTPS/x", 403, why)
	d := w.decided()
	if len(d) != 2 {
		t.Fatalf("decisions = %+v; want the two refusals", d)
	}
	for i, wantPort := range []int{w.httpPort, w.httpsPort} {
		got := d[i]
		if got.Verdict != Denied || got.Sandbox != "sb" || got.Host != "allowed.test" || got.Port != wantPort || got.Method != "POST" ||
			got.Path != "/x" || got.Policy != "local" || got.Addr != netip.MustParseAddr("127.0.0.1") || !strings.Contains(got.Reason, why) || got.Time.IsZero() {
			t.Errorf("decision %d = %+v", i, got)
		}
	}
	// A client that trusts the real server's CA only refuses the
	// proxy's leaf: the tunnel was intercepted.
	if status, text := w.do(w.client(w.serverCA), "GET", "https://allowed.test:HTTPS/"); status != 0 || !strings.Contains(text, "certificate") {
		t.Errorf("an inspected tunnel answered a client not trusting the sandbox CA: %d %q", status, text)
	}
}

func TestRulesAndDenyRules(t *testing.T) {
	w := newWorld(t, `
  gh:
    endpoints:
      - host: allowed.test
        ports: [HTTP, HTTPS]
        access: read-only
        rules:
          - allow: {method: POST, path: "/repos/*/issues"}
        deny_rules:
          - deny: {method: GET, path: "/secret/**"}
        allowed_ips: [127.0.0.1]
`, nil)
	c := w.client(w.sandboxCA)
	for _, base := range []string{"http://allowed.test:HTTP", "https://allowed.test:HTTPS"} {
		w.expect(c, "POST", base+"/repos/corral/issues", 200, "hello POST /repos/corral/issues body")
		w.expect(c, "POST", base+"/repos/corral/pulls", 403, "no rule allows POST /repos/corral/pulls")
		w.expect(c, "GET", base+"/secret/key", 403, "network_policies.gh.endpoints[0].deny_rules[0] (GET /secret/**)")
		w.expect(c, "GET", base+"/secret/../public", 403, `the path "/secret/../public" has . or .. segments`)
		w.expect(c, "GET", base+"/secret%2fkey", 403, "an encoded /")
		w.expect(c, "GET", base+"/public", 200, "hello GET /public")
	}
}

func TestPassThroughIsNotIntercepted(t *testing.T) {
	w := newWorld(t, `
  local:
    endpoints:
      - {host: allowed.test, ports: [HTTP, HTTPS], allowed_ips: [127.0.0.0/8]}
`, nil)
	c := w.client(w.serverCA) // the real server's certificate reaches the client
	w.expect(c, "POST", "https://allowed.test:HTTPS/any", 200, "hello POST /any body")
	w.expect(c, "DELETE", "http://allowed.test:HTTP/any", 200, "hello DELETE /any")
	if status, _ := w.do(w.client(w.sandboxCA), "GET", "https://allowed.test:HTTPS/"); status != 0 {
		t.Errorf("a pass-through tunnel showed a certificate of the sandbox CA")
	}
	w.decided()

	// not TLS: passed as it is
	tun, br, status := w.connect(fmt.Sprintf("allowed.test:%d", w.httpPort))
	if status != "200 " {
		t.Fatalf("CONNECT to the HTTP port = %q", status)
	}
	fmt.Fprintf(tun, "GET /plain HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
		t.Errorf("plain HTTP in a tunnel: %v, %v", resp, err)
	}

	// bytes sent with the CONNECT, before its answer, are not lost
	early, err := net.Dial("tcp", w.proxyURL.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer early.Close()
	_ = early.SetDeadline(time.Now().Add(20 * time.Second)) // a guard against a hang
	fmt.Fprintf(early, "CONNECT allowed.test:%d HTTP/1.1\r\nHost: allowed.test\r\n\r\nGET /early HTTP/1.1\r\nHost: allowed.test\r\n\r\n", w.httpPort)
	ebr := bufio.NewReader(early)
	if resp, err := http.ReadResponse(ebr, &http.Request{Method: http.MethodConnect}); err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT with early bytes: %v, %v", resp, err)
	}
	if resp, err := http.ReadResponse(ebr, nil); err != nil || resp.StatusCode != 200 {
		t.Errorf("a request sent with its CONNECT: %v, %v", resp, err)
	} else if body, _ := io.ReadAll(resp.Body); string(body) != "hello GET /early " {
		t.Errorf("a request sent with its CONNECT got %q", body)
	}

	// TLS asking for another name (domain fronting): refused
	tun, br, status = w.connect(fmt.Sprintf("allowed.test:%d", w.httpsPort))
	if status != "200 " {
		t.Fatalf("CONNECT = %q", status)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(w.serverCA.CertPEM())
	if err := tls.Client(&bufConn{Conn: tun, r: br}, &tls.Config{ServerName: "denied.test", RootCAs: roots}).Handshake(); err == nil {
		t.Error("a tunnel to allowed.test carried TLS for denied.test")
	}
	d := w.decided()
	if len(d) != 1 || d[0].Verdict != Denied || !strings.Contains(d[0].Reason, `the TLS server name "denied.test" is not the CONNECT's host allowed.test`) {
		t.Errorf("decisions = %+v; want the refused server name", d)
	}
}

func TestDeniedHostAndPort(t *testing.T) {
	w := newWorld(t, readOnlyRules, nil)
	c := w.client(w.sandboxCA)
	w.expect(c, "GET", "http://denied.test:HTTP/", 403, "no network policy allows denied.test port")
	if _, _, status := w.connect(fmt.Sprintf("denied.test:%d", w.httpsPort)); !strings.HasPrefix(status, "403 ") || !strings.Contains(status, "no network policy allows denied.test") {
		t.Errorf("CONNECT denied.test = %q; want a 403 naming the reason", status)
	}
	if _, _, status := w.connect("allowed.test:1"); !strings.HasPrefix(status, "403 ") {
		t.Errorf("CONNECT to a port no endpoint lists = %q; want 403", status)
	}
	if _, _, status := w.connect(fmt.Sprintf("127.0.0.1:%d", w.httpsPort)); !strings.HasPrefix(status, "403 ") {
		t.Errorf("CONNECT to the server's address = %q; want 403", status)
	}
	d := w.decided()
	if len(d) != 4 || d[0].Host != "denied.test" || d[0].Method != "GET" || d[1].Host != "denied.test" || d[1].Method != "" || d[3].Host != "127.0.0.1" {
		t.Errorf("decisions = %+v; want the four refusals", d)
	}
	for _, x := range d {
		if x.Verdict != Denied || x.Policy != "" {
			t.Errorf("decision %+v; want denied, no policy", x)
		}
	}
}

func TestAuditAllowsAndReports(t *testing.T) {
	w := newWorld(t, `
  watch:
    endpoints:
      - host: allowed.test
        ports: [HTTP, HTTPS]
        access: read-only
        enforcement: audit
        allowed_ips: [127.0.0.0/8]
`, nil)
	c := w.client(w.sandboxCA)
	w.expect(c, "GET", "https://allowed.test:HTTPS/", 200, "hello GET /")
	w.expect(c, "POST", "https://allowed.test:HTTPS/p", 200, "hello POST /p body")
	w.expect(c, "PUT", "http://allowed.test:HTTP/q", 200, "hello PUT /q body")
	d := w.decided()
	if len(d) != 2 || d[0].Verdict != Audited || d[0].Method != "POST" || d[1].Verdict != Audited || d[1].Path != "/q" ||
		!strings.Contains(d[0].Reason, "does not allow POST") || d[0].Policy != "watch" {
		t.Errorf("decisions = %+v; want two audited requests", d)
	}
	// audit relaxes the HTTP rules only, never the host
	w.expect(c, "GET", "http://denied.test:HTTP/", 403, "no network policy allows")
}

func TestWildcardIsOneWholeLabel(t *testing.T) {
	for _, tc := range []struct {
		pattern, host string
		want          bool
	}{
		{"*.example.com", "a.example.com", true},
		{"*.example.com", "example.com", false},
		{"*.example.com", "a.b.example.com", false},
		{"*.example.com", ".example.com", false},
		{"*.example.com", "aexample.com", false},
		{"*.example.com", "a.example.com.evil", false},
		{"example.com", "example.com", true},
		{"example.com", "a.example.com", false},
	} {
		if got := policy.HostMatches(tc.pattern, tc.host); got != tc.want {
			t.Errorf("HostMatches(%q, %q) = %v, want %v", tc.pattern, tc.host, got, tc.want)
		}
	}
	w := newWorld(t, `
  wild:
    endpoints:
      - {host: "*.wild.test", port: HTTP, allowed_ips: [127.0.0.0/8]}
`, nil)
	c := w.client(w.sandboxCA)
	w.expect(c, "GET", "http://a.wild.test:HTTP/", 200, "hello")
	w.expect(c, "GET", "http://A.Wild.Test:HTTP/", 200, "hello")
	w.expect(c, "GET", "http://wild.test:HTTP/", 403, "no network policy allows wild.test")
	w.expect(c, "GET", "http://a.b.wild.test:HTTP/", 403, "no network policy allows a.b.wild.test")
}

func TestSetRulesBothWaysAndClosesWhatItNoLongerAllows(t *testing.T) {
	w := newWorld(t, readOnlyRules, nil)
	c := w.client(w.sandboxCA)
	open := w.rules(`
  more:
    endpoints:
      - {host: denied.test, ports: [HTTP, HTTPS], allowed_ips: [127.0.0.0/8]}
`)
	w.expect(c, "GET", "http://denied.test:HTTP/", 403, "no network policy")
	w.proxy.SetRules(open)
	if got := w.proxy.Rules(); len(got) != 1 || got[0].Name != "more" {
		t.Errorf("Rules() = %+v; want the rules just set", got)
	}
	w.expect(c, "GET", "http://denied.test:HTTP/", 200, "hello GET /")

	// an open pass-through tunnel, used once, then no longer allowed
	tun, tc := w.tlsTunnel("denied.test", w.httpsPort, w.serverCA)
	fmt.Fprintf(tc, "GET /t HTTP/1.1\r\nHost: denied.test\r\n\r\n")
	tr := bufio.NewReader(tc)
	resp, err := http.ReadResponse(tr, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("through the tunnel: %v, %v", resp, err)
	}
	io.Copy(io.Discard, resp.Body)
	w.decided()

	w.proxy.SetRules(w.rules(readOnlyRules))
	_ = tun.SetReadDeadline(time.Now().Add(20 * time.Second)) // a guard against a hang, not a timing assertion
	if _, err := tr.ReadByte(); err == nil {
		t.Error("the tunnel to a host no longer allowed is still open")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Error("the tunnel to a host no longer allowed was not closed")
	}
	// The client's idle keep-alive connection to denied.test is closed too,
	// so the tunnel is one of the decisions, each of them a closure.
	d := w.decided()
	tunnelClosed := false
	for _, x := range d {
		if x.Verdict != Denied || x.Host != "denied.test" || !strings.Contains(x.Reason, "closed by new rules") {
			t.Errorf("decision %+v; want only closures of connections to denied.test", x)
		}
		if x.Method == "" && x.Port == w.httpsPort {
			tunnelClosed = true
		}
	}
	if !tunnelClosed {
		t.Errorf("decisions = %+v; want the closed tunnel among them", d)
	}
	w.expect(c, "GET", "http://denied.test:HTTP/", 403, "no network policy")
	w.expect(c, "GET", "http://allowed.test:HTTP/", 200, "hello")
}

func TestSetRulesClosesAnInspectedTunnel(t *testing.T) {
	w := newWorld(t, readOnlyRules, nil)
	tun, tc := w.tlsTunnel("allowed.test", w.httpsPort, w.sandboxCA)
	w.proxy.SetRules(nil)
	_ = tun.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := tc.Read(make([]byte, 1)); err == nil {
		t.Error("an intercepted tunnel to a host no longer allowed is still open")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Error("an intercepted tunnel to a host no longer allowed was not closed")
	}
}

// tlsTunnel opens a CONNECT tunnel to host:port and TLS in it, trusting
// only ca; it returns the raw connection too.
func (w *world) tlsTunnel(host string, port int, ca *CA) (net.Conn, *tls.Conn) {
	w.t.Helper()
	tun, br, status := w.connect(fmt.Sprintf("%s:%d", host, port))
	if status != "200 " {
		w.t.Fatalf("CONNECT %s:%d = %q; want 200", host, port, status)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.CertPEM())
	tc := tls.Client(&bufConn{Conn: tun, r: br}, &tls.Config{ServerName: host, RootCAs: roots})
	if err := tc.Handshake(); err != nil {
		w.t.Fatalf("TLS through the tunnel to %s: %v", host, err)
	}
	return tun, tc
}

func TestSetRulesCutsARequestInFlight(t *testing.T) {
	w := newWorld(t, readOnlyRules, nil)
	for _, u := range []string{"http://allowed.test:HTTP/hang", "https://allowed.test:HTTPS/hang"} {
		w.proxy.SetRules(w.rules(readOnlyRules))
		u = strings.NewReplacer(":HTTPS", fmt.Sprintf(":%d", w.httpsPort), ":HTTP", fmt.Sprintf(":%d", w.httpPort)).Replace(u)
		resp, err := w.client(w.sandboxCA).Get(u)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("GET %s: %v, %v", u, resp, err)
		}
		w.proxy.SetRules(w.rules(`
  other:
    endpoints:
      - {host: denied.test, port: 1}
`))
		read := make(chan error, 1)
		go func() { _, err := io.Copy(io.Discard, resp.Body); read <- err }()
		select {
		case err := <-read:
			if err == nil {
				t.Errorf("%s: the body ended cleanly; want it cut", u)
			}
		case <-time.After(20 * time.Second): // a guard against a hang, not a timing assertion
			t.Errorf("%s: a request in flight to a host no longer allowed was not cut", u)
		}
		resp.Body.Close()
		d := w.decided()
		if !slices.ContainsFunc(d, func(x Decision) bool {
			return x.Method == "GET" && x.Path == "/hang" && strings.Contains(x.Reason, "closed by new rules: no network policy allows allowed.test")
		}) {
			t.Errorf("%s: decisions = %+v; want the request cut", u, d)
		}
	}
}

// bufConn reads what a bufio.Reader kept first.
type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// TestResolvedAddressesAreCheckedBeforeAnyDial: a name whose endpoint lists
// no allowed_ips resolves to loopback, metadata, private, link-local or
// mapped addresses (DNS rebinding): refused, and nothing is dialed. Only
// the refused addresses are ever handed to the dialer, which dials nothing.
func TestResolvedAddressesAreCheckedBeforeAnyDial(t *testing.T) {
	answers := map[string][]string{
		"loop.r.test":     {"127.0.0.1"},
		"meta.r.test":     {"169.254.169.254"},
		"private.r.test":  {"10.1.2.3", "192.168.1.1"},
		"link.r.test":     {"fe80::1"},
		"mapped.r.test":   {"::ffff:127.0.0.1"},
		"cgnat.r.test":    {"100.64.0.1"},
		"ula.r.test":      {"fd00::1"},
		"gateway.r.test":  {"203.0.113.7"},
		"mixed.r.test":    {"10.0.0.1", "192.0.2.10"},
		"nothing.r.test":  {},
		"unspec.r.test":   {"0.0.0.0"},
		"nat64.r.test":    {"64:ff9b::a9fe:a9fe"},
		"multicas.r.test": {"224.0.0.1"},
	}
	var mu sync.Mutex
	var dialed []string
	w := newWorld(t, `
  rebind:
    endpoints:
      - {host: "*.r.test", ports: [80, 443]}
`, func(cfg *Config) {
		cfg.Hosts = nil
		cfg.Deny = []netip.Addr{netip.MustParseAddr("203.0.113.7")}
		cfg.Resolver = func(_ context.Context, host string) ([]netip.Addr, error) {
			var out []netip.Addr
			for _, a := range answers[host] {
				out = append(out, netip.MustParseAddr(a))
			}
			return out, nil
		}
	})
	w.proxy.dial = func(_ context.Context, _, addr string) (net.Conn, error) {
		mu.Lock()
		dialed = append(dialed, addr)
		mu.Unlock()
		return nil, fmt.Errorf("the test dials nothing")
	}
	c := w.client(w.sandboxCA)
	for name, addrs := range answers {
		if name == "mixed.r.test" {
			continue
		}
		want := "(not in the endpoint's allowed_ips)"
		if len(addrs) == 0 {
			want = "cannot resolve"
		}
		w.expect(c, "GET", "http://"+name+"/", 403, want)
		if _, _, status := w.connect(name + ":443"); !strings.HasPrefix(status, "403 ") || !strings.Contains(status, want) {
			t.Errorf("CONNECT %s = %q; want 403 and %q", name, status, want)
		}
	}
	for _, x := range w.decided() {
		if x.Verdict != Denied || x.Policy != "rebind" || (x.Host != "nothing.r.test" && x.Addr.String() != answers[x.Host][0]) {
			t.Errorf("decision %+v", x)
		}
	}
	mu.Lock()
	if len(dialed) != 0 {
		t.Errorf("dialed %v; want nothing dialed", dialed)
	}
	mu.Unlock()
	// of a private and a public answer only the public one is dialed
	if _, _, status := w.connect("mixed.r.test:443"); !strings.HasPrefix(status, "502 ") {
		t.Errorf("CONNECT mixed.test = %q; want 502 from the dialer that dials nothing", status)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(dialed) != 1 || dialed[0] != "192.0.2.10:443" {
		t.Errorf("dialed %v; want only 192.0.2.10:443", dialed)
	}
}

func TestCheckAddr(t *testing.T) {
	lo := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	gw := []netip.Addr{netip.MustParseAddr("198.51.100.1"), netip.MustParseAddr("2001:db8::1")}
	for _, tc := range []struct {
		addr    string
		allowed []netip.Prefix
		ok      bool
	}{
		{"127.0.0.1", nil, false},
		{"127.0.0.1", lo, true},
		{"::ffff:127.0.0.1", lo, true},
		{"::ffff:127.0.0.1", nil, false},
		{"::1", lo, false},
		{"::1", nil, false},
		{"169.254.169.254", nil, false},
		{"169.254.169.254", lo, false},
		{"169.254.1.1", nil, false},
		{"fe80::1", nil, false},
		{"10.0.0.1", nil, false},
		{"10.0.0.1", []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, true},
		{"172.16.5.4", nil, false},
		{"192.168.0.1", nil, false},
		{"fc00::1", nil, false},
		{"fd12::1", nil, false},
		{"100.64.0.1", nil, false},
		{"100.127.255.255", nil, false},
		{"0.0.0.0", nil, false},
		{"::", nil, false},
		{"224.0.0.251", nil, false},
		{"ff02::1", nil, false},
		{"255.255.255.255", nil, false},
		{"::ffff:10.0.0.1", nil, false},
		{"::ffff:169.254.169.254", nil, false},
		{"64:ff9b::7f00:1", nil, false},
		{"2002:a00:1::", nil, false},
		{"::127.0.0.1", nil, false},
		{"198.51.100.1", nil, false},
		{"198.51.100.1", []netip.Prefix{netip.MustParsePrefix("198.51.100.1/32")}, true},
		{"::ffff:198.51.100.1", nil, false},
		{"2001:db8::1", nil, false},
		{"93.184.216.34", nil, true},
		{"2606:4700::1111", nil, true},
		{"64:ff9b::5db8:d822", nil, true},
	} {
		err := CheckAddr(netip.MustParseAddr(tc.addr), tc.allowed, gw)
		if (err == nil) != tc.ok {
			t.Errorf("CheckAddr(%s, %v) = %v; want allowed %v", tc.addr, tc.allowed, err, tc.ok)
		}
	}
	if err := CheckAddr(netip.Addr{}, nil, nil); err == nil {
		t.Error("CheckAddr accepted no address")
	}
}

func TestHostHeaderMustBeTheConnectTarget(t *testing.T) {
	w := newWorld(t, readOnlyRules+`
  other:
    endpoints:
      - {host: denied.test, ports: [HTTPS], access: full, allowed_ips: [127.0.0.0/8]}
`, nil)
	_, tc := w.tlsTunnel("allowed.test", w.httpsPort, w.sandboxCA)
	fmt.Fprintf(tc, "POST /x HTTP/1.1\r\nHost: denied.test:%d\r\nContent-Length: 0\r\n\r\n", w.httpsPort)
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 403 || !strings.Contains(string(body), "not its CONNECT's allowed.test") {
		t.Errorf("a request for another host in a tunnel = %d %q; want 403", resp.StatusCode, body)
	}
}

func TestCA(t *testing.T) {
	ca, err := NewCA("corral sandbox sb")
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM := ca.PEM()
	again, err := LoadCA(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := again.Leaf("pypi.org")
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.CertPEM())
	if _, err := leaf.Leaf.Verify(x509.VerifyOptions{DNSName: "pypi.org", Roots: roots}); err != nil {
		t.Errorf("a leaf of the loaded CA does not verify against the original: %v", err)
	}
	if _, err := leaf.Leaf.Verify(x509.VerifyOptions{DNSName: "evil.org", Roots: roots}); err == nil {
		t.Error("a leaf for pypi.org verifies for evil.org")
	}
	if cached, _ := again.Leaf("pypi.org"); cached != leaf {
		t.Error("the leaf was not cached")
	}
	other, _ := NewCA("other")
	if _, err := LoadCA(certPEM, func() []byte { _, k := other.PEM(); return k }()); err == nil {
		t.Error("LoadCA accepted another CA's key")
	}
	if _, err := LoadCA([]byte("junk"), keyPEM); err == nil {
		t.Error("LoadCA accepted junk")
	}
}

func TestServeSeveralListeners(t *testing.T) {
	w := newWorld(t, readOnlyRules, nil)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- w.proxy.Serve(l) }()
	second := &url.URL{Scheme: "http", Host: l.Addr().String()}
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(second)}}
	w.expect(c, "GET", "http://allowed.test:HTTP/2", 200, "hello GET /2")
	l.Close()
	if err := <-served; err != nil {
		t.Errorf("Serve = %v after its listener closed; want nil", err)
	}
	w.expect(w.client(w.sandboxCA), "GET", "http://allowed.test:HTTP/1", 200, "hello GET /1")
}
