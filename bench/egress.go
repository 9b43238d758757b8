package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/corral-sandbox/corral/internal/caller"
	"github.com/corral-sandbox/corral/internal/egress"
	"github.com/corral-sandbox/corral/internal/ledger"
	"github.com/corral-sandbox/corral/internal/policy"
	"github.com/corral-sandbox/corral/internal/secrets"
	"github.com/corral-sandbox/corral/internal/store/sqlite"
)

// egressTitle is the title of the egress figures.
const egressTitle = "egress: HTTP GETs and a 1 GiB download through a sandbox's egress proxy vs direct, on loopback"

// downloadBytes is the size of the download the egress benchmark times.
const downloadBytes = 1 << 30

// egressPaths are the ways a client reaches the benchmark's server.
var egressPaths = []struct {
	name, host string
	https      bool
	proxied    bool
}{
	{"direct HTTPS", "pass.test", true, false},
	{"HTTPS via CONNECT pass-through", "pass.test", true, true},
	{"HTTPS inspected (TLS terminated)", "inspect.test", true, true},
	{"direct HTTP", "pass.test", false, false},
	{"HTTP via the proxy", "pass.test", false, true},
	{"HTTPS inspected, a credential injected", "cred.test", true, true},
}

// benchPlaceholder is what the benchmark's client sends for its
// credential.
const benchPlaceholder = "corral_ph_benchbenchbenchbenchbenchbenc"

// inspectedHost says whether the proxy terminates TLS to host.
func inspectedHost(host string) bool { return host == "inspect.test" || host == "cred.test" }

// benchEgress measures the egress proxy (internal/egress) in this process,
// with no sandbox and no Docker: an HTTP and an HTTPS server on 127.0.0.1,
// reached directly and through the proxy (a CONNECT tunnel spliced at TCP
// level, a tunnel whose TLS the proxy terminates and inspects, the same
// with a credential put in each request from the secrets and each use
// kept in a ledger on a real store, and plain HTTP), for keep-alive GET
// latency, GETs per second from 4 clients, a GET
// on a new connection each time, and a 1 GiB download.
func benchEgress(quick bool) ([]*figure, error) {
	rounds, gets, run, download, downloads := 10, 300, time.Second, int64(downloadBytes), 5
	if quick {
		rounds, gets, run, download, downloads = 3, 100, 300*time.Millisecond, 64<<20, 1
	}
	dir, err := os.MkdirTemp("", "corral-bench-egress-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	s, err := startEgressWorld(dir)
	if err != nil {
		return nil, err
	}
	defer s.close()
	var figs []*figure
	add := func(name string, v float64, unit, goal string, met *bool) {
		figs = append(figs, &figure{Name: name, Value: v, Unit: unit, Goal: goal, Met: met})
	}
	const direct, pass, inspected, injected = "direct HTTPS", "HTTPS via CONNECT pass-through", "HTTPS inspected (TLS terminated)", "HTTPS inspected, a credential injected"
	// Paths are interleaved, round after round, so that the load of a
	// shared machine falls on each alike, and ratios are the median of
	// each round's ratio.
	lat, freshLat := map[string][]time.Duration{}, map[string][]time.Duration{}
	roundP50, roundFresh := map[string][]float64{}, map[string][]float64{}
	p50 := func(d []time.Duration) float64 { return float64(stats(d)[0].Microseconds()) / 1000 }
	rates := map[string][]float64{}
	for range rounds {
		for _, path := range egressPaths {
			c := s.client(path.https, path.proxied, path.host)
			u := s.url(path.host, path.https, "/")
			d, err := latencies(c, u, gets)
			c.CloseIdleConnections()
			if err != nil {
				return nil, fmt.Errorf("%s: %w", path.name, err)
			}
			lat[path.name] = append(lat[path.name], d...)
			roundP50[path.name] = append(roundP50[path.name], p50(d))
			r, err := getsPerSecond(func() *http.Client { return s.client(path.https, path.proxied, path.host) }, u, 4, run/time.Duration(rounds))
			if err != nil {
				return nil, fmt.Errorf("%s: %w", path.name, err)
			}
			rates[path.name] = append(rates[path.name], r)
			if !path.https {
				continue
			}
			var fresh []time.Duration
			for range gets / 10 { // a new connection (and TLS handshake) for every GET
				c := s.client(true, path.proxied, path.host)
				d, err := latencies(c, u, 1)
				c.CloseIdleConnections()
				if err != nil {
					return nil, fmt.Errorf("%s, new connections: %w", path.name, err)
				}
				fresh = append(fresh, d...)
			}
			freshLat[path.name] = append(freshLat[path.name], fresh...)
			roundFresh[path.name] = append(roundFresh[path.name], p50(fresh))
		}
	}
	for _, path := range egressPaths {
		add("GET p50 (keep-alive), "+path.name, p50(lat[path.name]), "ms", "", nil)
		add("GETs/s (4 clients), "+path.name, median(rates[path.name]), "req/s", "", nil)
	}
	for _, path := range egressPaths[:3] {
		add("GET p50 (new connection each), "+path.name, p50(freshLat[path.name]), "ms", "", nil)
	}
	ratio := pairedRatio(roundP50[pass], roundP50[direct])
	add("GET p50 pass-through / direct (keep-alive)", ratio, "×", "≤ 1.2", ptr(ratio <= 1.2))
	ratio = pairedRatio(roundFresh[pass], roundFresh[direct])
	add("GET p50 pass-through / direct (new connection each)", ratio, "×", "≤ 1.2", ptr(ratio <= 1.2))
	add("GET p50 inspected / direct (keep-alive)", pairedRatio(roundP50[inspected], roundP50[direct]), "×", "", nil)
	ratio = pairedRatio(roundP50[injected], roundP50[inspected])
	add("GET p50 inspected with a credential injected / inspected without (keep-alive)", ratio, "×", "≤ 1.1", ptr(ratio <= 1.1))
	add("GET p50 HTTP via the proxy / direct HTTP (keep-alive)", pairedRatio(roundP50["HTTP via the proxy"], roundP50["direct HTTP"]), "×", "", nil)
	add("GETs/s pass-through / direct", 100*pairedRatio(rates[pass], rates[direct]), "%", "", nil)
	add("GETs/s inspected / direct", 100*pairedRatio(rates[inspected], rates[direct]), "%", "", nil)

	mbps := map[string][]float64{}
	for range downloads {
		for _, path := range egressPaths {
			c := s.client(path.https, path.proxied, path.host)
			took, err := fetch(c, s.url(path.host, path.https, "/big?n="+strconv.FormatInt(download, 10)), download)
			c.CloseIdleConnections()
			if err != nil {
				return nil, fmt.Errorf("%s download: %w", path.name, err)
			}
			mbps[path.name] = append(mbps[path.name], float64(download)/took.Seconds()/1e6)
		}
	}
	for _, path := range egressPaths {
		add(fmt.Sprintf("%d MiB download (median of %d), %s", download>>20, downloads, path.name), median(mbps[path.name]), "MB/s", "", nil)
	}
	share := 100 * pairedRatio(mbps[pass], mbps[direct])
	add("download pass-through / direct", share, "%", "≥ 80", ptr(share >= 80))
	add("download inspected / direct", 100*pairedRatio(mbps[inspected], mbps[direct]), "%", "", nil)
	add("download HTTP via the proxy / direct HTTP", 100*pairedRatio(mbps["HTTP via the proxy"], mbps["direct HTTP"]), "%", "", nil)
	return figs, nil
}

// pairedRatio is the median of a[i]/b[i]: measures of one round each.
func pairedRatio(a, b []float64) float64 {
	r := make([]float64, len(a))
	for i := range a {
		r[i] = a[i] / b[i]
	}
	return median(r)
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

func ptr(b bool) *bool { return &b }

// egressWorld is the benchmark's servers and proxy.
type egressWorld struct {
	plain, secure net.Listener
	proxy         *egress.Proxy
	proxyURL      *url.URL
	sandboxCA     *egress.CA
	serverCA      *egress.CA
	servers       []*http.Server
	store         *sqlite.Store
	ledger        *ledger.Ledger
}

// benchToken is the value of the benchmark's credential.
const benchToken = "bench-token-value"

// chunk is what /big sends, again and again.
var chunk = make([]byte, 256<<10)

// startEgressWorld starts the servers and the proxy; its credential's
// secret and ledger are kept in a store under dir.
func startEgressWorld(dir string) (*egressWorld, error) {
	s := &egressWorld{}
	var err error
	if s.sandboxCA, err = egress.NewCA("bench sandbox CA"); err != nil {
		return nil, err
	}
	if s.serverCA, err = egress.NewCA("bench server CA"); err != nil {
		return nil, err
	}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.Host, "cred.test:") {
			if r.Header.Get("Authorization") != "Bearer "+benchToken {
				http.Error(w, "no credential", http.StatusUnauthorized)
				return
			}
		}
		if r.URL.Path != "/big" {
			_, _ = io.WriteString(w, "hello")
			return
		}
		n, _ := strconv.ParseInt(r.URL.Query().Get("n"), 10, 64)
		w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
		for n > 0 {
			k, err := w.Write(chunk[:min(n, int64(len(chunk)))])
			if err != nil {
				return
			}
			n -= int64(k)
		}
	})
	if s.plain, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		return nil, err
	}
	if s.secure, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		return nil, err
	}
	tlsConf := &tls.Config{GetCertificate: func(h *tls.ClientHelloInfo) (*tls.Certificate, error) { return s.serverCA.Leaf(h.ServerName) }}
	for _, l := range []net.Listener{s.plain, tls.NewListener(s.secure, tlsConf)} {
		srv := &http.Server{Handler: handler}
		s.servers = append(s.servers, srv)
		go func() { _ = srv.Serve(l) }()
	}
	ports := []int{s.plain.Addr().(*net.TCPAddr).Port, s.secure.Addr().(*net.TCPAddr).Port}
	lo := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(s.serverCA.CertPEM())
	pin := []netip.Addr{netip.MustParseAddr("127.0.0.1")}
	if s.store, err = sqlite.Open(context.Background(), filepath.Join(dir, "corral.db")); err != nil {
		return nil, err
	}
	keys, err := secrets.Load(filepath.Join(dir, "secrets.key"))
	if err != nil {
		return nil, err
	}
	sec := secrets.New(s.store, keys)
	if _, err := sec.Create(context.Background(), "bench-token", []byte(benchToken)); err != nil {
		return nil, err
	}
	s.ledger = ledger.New(s.store, nil)
	s.proxy, err = egress.New(egress.Config{Sandbox: "bench", CA: s.sandboxCA, RootCAs: roots,
		Hosts: map[string][]netip.Addr{"pass.test": pin, "inspect.test": pin, "cred.test": pin},
		Rules: []policy.NetworkPolicy{{Name: "bench", Endpoints: []policy.Endpoint{
			{Host: "pass.test", Ports: ports, Enforcement: policy.Enforce, AllowedIPs: lo},
			{Host: "inspect.test", Ports: ports, Access: policy.AccessReadOnly, Enforcement: policy.Enforce, AllowedIPs: lo},
			{Host: "cred.test", Ports: ports, Access: policy.AccessReadOnly, Enforcement: policy.Enforce, AllowedIPs: lo},
		}}},
		Bindings: []egress.Binding{{Placeholder: benchPlaceholder, Credential: policy.Credential{Name: "bench", Secret: "bench-token",
			Inject:    policy.Injection{Header: "Authorization", Format: "Bearer {value}"},
			Endpoints: []policy.CredentialEndpoint{{Host: "cred.test", Ports: ports}}}}},
		Secret: func(ctx context.Context, name string) ([]byte, error) {
			return sec.Value(ctx, caller.DefaultTenant, name)
		},
		OnUse: s.ledger.Used})
	if err != nil {
		return nil, err
	}
	pl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	go func() { _ = s.proxy.Serve(pl) }()
	s.proxyURL = &url.URL{Scheme: "http", Host: pl.Addr().String()}
	return s, nil
}

func (s *egressWorld) close() {
	s.proxy.Close()
	for _, srv := range s.servers {
		_ = srv.Close()
	}
	s.ledger.Close()
	s.store.Close()
}

func (s *egressWorld) url(host string, https bool, path string) string {
	if https {
		return fmt.Sprintf("https://%s:%d%s", host, s.secure.Addr().(*net.TCPAddr).Port, path)
	}
	return fmt.Sprintf("http://%s:%d%s", host, s.plain.Addr().(*net.TCPAddr).Port, path)
}

// client reaches the servers directly (every name is 127.0.0.1) or
// through the proxy, trusting the server's CA, or the sandbox's for an
// inspected host; to cred.test it sends the credential's placeholder.
func (s *egressWorld) client(https, proxied bool, host string) *http.Client {
	roots := x509.NewCertPool()
	if inspectedHost(host) {
		roots.AppendCertsFromPEM(s.sandboxCA.CertPEM())
	} else {
		roots.AppendCertsFromPEM(s.serverCA.CertPEM())
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, MaxIdleConnsPerHost: 8, DisableCompression: true}
	if proxied {
		tr.Proxy = http.ProxyURL(s.proxyURL)
	} else {
		var d net.Dialer
		tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			_, port, _ := net.SplitHostPort(addr)
			return d.DialContext(ctx, network, net.JoinHostPort("127.0.0.1", port))
		}
	}
	c := &http.Client{Transport: tr, Timeout: 5 * time.Minute}
	switch host {
	case "cred.test":
		c.Transport = withAuthorization{tr, "Bearer " + benchPlaceholder}
	case "inspect.test": // a token of its own, the same size: the requests differ only in the placeholder
		c.Transport = withAuthorization{tr, "Bearer " + strings.Repeat("t", len(benchPlaceholder))}
	}
	return c
}

// withAuthorization sends an Authorization header: the credential's
// placeholder, as an SDK in a sandbox sends what its environment holds.
type withAuthorization struct {
	*http.Transport
	value string
}

func (t withAuthorization) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", t.value)
	return t.Transport.RoundTrip(r)
}

// latencies times n GETs of u in a row.
func latencies(c *http.Client, u string, n int) ([]time.Duration, error) {
	out := make([]time.Duration, 0, n)
	for range n {
		t0 := time.Now()
		if err := get(c, u); err != nil {
			return nil, err
		}
		out = append(out, time.Since(t0))
	}
	return out, nil
}

func get(c *http.Client, u string) error {
	resp, err := c.Get(u)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	return nil
}

// getsPerSecond runs clients GETting u for d, each with its own client.
func getsPerSecond(newClient func() *http.Client, u string, clients int, d time.Duration) (float64, error) {
	var done atomic.Int64
	var failure atomic.Value
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := newClient()
			defer c.CloseIdleConnections()
			for time.Now().Before(deadline) {
				if err := get(c, u); err != nil {
					failure.Store(err)
					return
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	if err, ok := failure.Load().(error); ok {
		return 0, err
	}
	return float64(done.Load()) / d.Seconds(), nil
}

// fetch times the download of u, which must be n bytes long.
func fetch(c *http.Client, u string, n int64) (time.Duration, error) {
	t0 := time.Now()
	resp, err := c.Get(u)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	got, err := io.Copy(io.Discard, resp.Body)
	if err == nil && got != n {
		err = fmt.Errorf("got %d bytes of %d", got, n)
	}
	return time.Since(t0), err
}
