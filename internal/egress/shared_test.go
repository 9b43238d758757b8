package egress

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/internal/driver"
)

// sharedWorld is a Shared on loopback serving sandboxes "a" (allowed to
// reach allowed.test, a server on 127.0.0.1) and "b" (allowed nothing).
type sharedWorld struct {
	t        *testing.T
	s        *Sandboxes
	sh       driver.SharedEgress
	upstream string // allowed.test:PORT

	mu   sync.Mutex
	seen []http.Header // the headers the server received
}

func newSharedWorld(t *testing.T) *sharedWorld {
	w := &sharedWorld{t: t}
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		w.mu.Lock()
		w.seen = append(w.seen, r.Header.Clone())
		w.mu.Unlock()
		fmt.Fprintf(rw, "hello %s %s", r.Method, r.URL.Path)
	}))
	t.Cleanup(srv.Close)
	port := strings.TrimPrefix(srv.URL, "http://127.0.0.1:")
	w.upstream = "allowed.test:" + port
	rules := (&world{t: t}).rules(`
  local:
    endpoints:
      - host: allowed.test
        ports: [` + port + `]
        allowed_ips: [127.0.0.0/8]
`)
	w.s = &Sandboxes{Dir: t.TempDir(),
		Lookup: func(_ context.Context, id string) (Network, error) {
			nw := Network{Name: "sandbox-" + id, Hosts: []string{"allowed.test:127.0.0.1"}}
			if id == "a" {
				nw.Rules = rules
			}
			return nw, nil
		},
		Placeholder: func(id string, gen int64, credential, role string) string {
			return fmt.Sprintf("secret-%s-%d-%s-%s", id, gen, credential, strings.ReplaceAll(role, " ", "_"))
		}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if w.sh, err = w.s.Share(ln, netip.MustParseAddrPort(ln.Addr().String())); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		w.sh.Close()
		w.s.Forget("a")
		w.s.Forget("b")
	})
	return w
}

// proxyURL is incarnation ref's HTTP_PROXY, as Env gives it.
func (w *sharedWorld) proxyURL(ref driver.Ref) *url.URL {
	w.t.Helper()
	env, err := w.sh.Env(ref, nil)
	if err != nil {
		w.t.Fatal(err)
	}
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "HTTP_PROXY="); ok {
			u, err := url.Parse(v)
			if err != nil {
				w.t.Fatal(err)
			}
			return u
		}
	}
	w.t.Fatalf("no HTTP_PROXY in %q", env)
	return nil
}

// get fetches path from the allowed server through proxy and returns the
// status and body.
func (w *sharedWorld) get(proxy *url.URL, path string) (int, string) {
	w.t.Helper()
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(proxy)}}
	defer c.CloseIdleConnections()
	resp, err := c.Get("http://" + w.upstream + path)
	if err != nil {
		w.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func (w *sharedWorld) expect(proxy *url.URL, status int, body string) {
	w.t.Helper()
	if got, text := w.get(proxy, "/x"); got != status || !strings.Contains(text, body) {
		w.t.Errorf("GET through %s = %d %q; want %d and %q", proxy.Redacted(), got, text, status, body)
	}
}

func TestSharedRoutesEachIncarnationToItsOwnRules(t *testing.T) {
	w := newSharedWorld(t)
	ctx := context.Background()
	a1, a2, b1 := driver.Ref{ID: "a", Generation: 1}, driver.Ref{ID: "a", Generation: 2}, driver.Ref{ID: "b", Generation: 1}
	for _, ref := range []driver.Ref{a1, b1} {
		if err := w.sh.Admit(ctx, ref); err != nil {
			t.Fatal(err)
		}
		if !w.s.Attached(ref) {
			t.Fatalf("%+v admitted but not attached", ref)
		}
	}
	w.expect(w.proxyURL(a1), 200, "hello GET /x")
	w.expect(w.proxyURL(b1), 403, "")
	w.mu.Lock()
	for _, h := range w.seen {
		if h.Get("Proxy-Authorization") != "" {
			t.Errorf("the server received the sandbox's proxy token: %q", h)
		}
	}
	w.mu.Unlock()

	anonymous := &url.URL{Scheme: "http", Host: w.sh.Addr().String()}
	w.expect(anonymous, 407, "no token of a running sandbox")
	forged := w.proxyURL(a1)
	forged.User = url.UserPassword("a.1", w.s.Placeholder("b", 1, "", tokenRole)) // b's token under a's name
	w.expect(forged, 407, "")

	// A new incarnation's token is let in, the old one's no longer.
	if err := w.sh.Admit(ctx, a2); err != nil {
		t.Fatal(err)
	}
	w.expect(w.proxyURL(a1), 407, "")
	w.expect(w.proxyURL(a2), 200, "hello GET /x")
	if w.s.Attached(a1) || !w.s.Attached(a2) {
		t.Errorf("attached: generation 1 %v, 2 %v; want only 2", w.s.Attached(a1), w.s.Attached(a2))
	}
	// A deleted sandbox's token is refused.
	w.s.Forget("a")
	w.expect(w.proxyURL(a2), 407, "")
}

// A connection that sends no request, or not HTTP, is closed without
// holding the listener: the next one is served.
func TestSharedClosesWhatIsNotAProxyRequest(t *testing.T) {
	w := newSharedWorld(t)
	ref := driver.Ref{ID: "a", Generation: 1}
	if err := w.sh.Admit(context.Background(), ref); err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", w.sh.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "\x16\x03\x01 not http\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := c.Read(make([]byte, 1)); err == nil {
		t.Errorf("a connection that sent no HTTP got %d bytes of an answer, and stays open", n)
	}
	w.expect(w.proxyURL(ref), 200, "hello GET /x")
}

func TestSharedEnvNamesTheSharedAddress(t *testing.T) {
	w := newSharedWorld(t)
	env, err := w.sh.Env(driver.Ref{ID: "a", Generation: 3}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := driver.EgressProxyEnv + "=" + w.sh.Addr().String()
	if !strings.Contains(strings.Join(env, "\n"), want) {
		t.Errorf("env %q; want %s", env, want)
	}
	if u := w.proxyURL(driver.Ref{ID: "a", Generation: 3}); u.User.Username() != "a.3" || u.Host != w.sh.Addr().String() {
		t.Errorf("HTTP_PROXY %s; want the user a.3 at %s", u.Redacted(), w.sh.Addr())
	}
}

// One address cannot hold every connection that is yet to send its
// first request: past maxUnroutedPerIP, its new ones are closed at once;
// once it lets go, it is served again.
func TestSharedBoundsWhatOneAddressHolds(t *testing.T) {
	w := newSharedWorld(t)
	ref := driver.Ref{ID: "a", Generation: 1}
	if err := w.sh.Admit(context.Background(), ref); err != nil {
		t.Fatal(err)
	}
	sh := w.sh.(*Shared)
	unrouted := func() int {
		sh.mu.Lock()
		defer sh.mu.Unlock()
		return sh.total
	}
	waitFor := func(n int) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); unrouted() != n; time.Sleep(2 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d connections wait to be routed, want %d", unrouted(), n)
			}
		}
	}
	var held []net.Conn
	for range maxUnroutedPerIP {
		c, err := net.Dial("tcp", w.sh.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	waitFor(maxUnroutedPerIP)
	extra, err := net.Dial("tcp", w.sh.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	extra.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := extra.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("a connection past the bound: %v; want it closed at once", err)
	}
	for _, c := range held {
		c.Close()
	}
	waitFor(0)
	w.expect(w.proxyURL(ref), 200, "hello GET /x")
}

// A CONNECT tunnel is routed by its token as a request is: the tunnel
// carries what the sandbox sends on to the allowed server.
func TestSharedRoutesATunnel(t *testing.T) {
	w := newSharedWorld(t)
	ref := driver.Ref{ID: "a", Generation: 1}
	if err := w.sh.Admit(context.Background(), ref); err != nil {
		t.Fatal(err)
	}
	proxy := w.proxyURL(ref)
	c, err := net.Dial("tcp", proxy.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	pass, _ := proxy.User.Password()
	auth := base64.StdEncoding.EncodeToString([]byte(proxy.User.Username() + ":" + pass))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: Basic %s\r\n\r\nGET /tunnelled HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", w.upstream, w.upstream, auth, w.upstream)
	got, _ := io.ReadAll(c)
	if !strings.HasPrefix(string(got), "HTTP/1.1 200") || !strings.Contains(string(got), "hello GET /tunnelled") {
		t.Errorf("through the tunnel: %q", got)
	}
}
