// Package egress is a sandbox's egress proxy: the only way out of its
// network namespace. Clients inside reach it through HTTP_PROXY and
// HTTPS_PROXY; it allows what the sandbox's network_policies allow and
// reports every refusal (and every audit) as a Decision.
//
// A destination is decided in this order: its host (exact, or "*." as the
// whole first label), its port, then the addresses the proxy itself
// resolves for the name (--add-host pins first), each checked with
// CheckAddr right before it is dialed: the proxy dials the checked address,
// never the name, so a second DNS answer cannot slip in. A CONNECT to an
// endpoint without access, rules or deny_rules is spliced at TCP level; one
// to an endpoint that Inspects() is terminated with a leaf certificate of
// the sandbox's CA, and each request in it is decided by method and path.
// Enforcement audit lets through, and reports, what the HTTP rules would
// refuse; it never lets through a host, port or address that is refused.
//
// HTTP is parsed by net/http; proxying requests and intercepting TLS are
// github.com/elazarl/goproxy's; pass-through tunnels are spliced here.
package egress

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/elazarl/goproxy"

	"github.com/corral-sandbox/corral/internal/policy"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

// Config is what a sandbox's proxy is made of.
type Config struct {
	Sandbox string // the sandbox's name, for decisions
	Rules   []policy.NetworkPolicy
	// Hosts are --add-host pins: a name's addresses, used instead of DNS
	// (and still checked with CheckAddr).
	Hosts map[string][]netip.Addr
	CA    *CA // the sandbox's CA, for inspected endpoints
	// Deny are the gateway's own addresses: refused unless an endpoint's
	// allowed_ips lists them.
	Deny []netip.Addr
	// Resolver resolves names that Hosts does not pin; nil:
	// net.DefaultResolver.
	Resolver func(ctx context.Context, host string) ([]netip.Addr, error)
	// OnDecision is called, synchronously (it must not block), with every
	// refused or audited connection and request, and with allowed ones
	// too when LogAllowed is set.
	OnDecision func(Decision)
	LogAllowed bool
	// RootCAs verify the real servers of inspected endpoints; nil: the
	// system's roots.
	RootCAs *x509.CertPool
	// DialTimeout bounds a connection to a server; 0: 10 s.
	DialTimeout time.Duration
	// Limits bound what the sandbox can make the proxy hold; zero fields
	// take DefaultLimits'.
	Limits Limits
	// Budget, when set, is shared with other proxies: each connection takes
	// one of its slots as well as one of Limits.MaxConns.
	Budget *Budget
	// Bindings are the sandbox's credentials (see credentials.go); Secret
	// returns a secret's value, read for each request that injects it, and
	// OnUse is called, synchronously (it must not block), with each
	// injection and each refusal of a placeholder.
	Bindings []Binding
	Secret   func(ctx context.Context, name string) ([]byte, error)
	OnUse    func(Use)
}

// Limits bound what one sandbox can make its proxy hold.
type Limits struct {
	// MaxConns bounds the sandbox's open connections to the proxy (each
	// holds at most one connection to a server too); one more is closed at
	// once and reported as denied.
	MaxConns int
	// HeaderTimeout bounds the reading of a request's header, and
	// IdleTimeout how long a keep-alive connection waits for the next one.
	HeaderTimeout, IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's line and header.
	MaxHeaderBytes int
}

// DefaultLimits are the limits a proxy takes where its Config says 0.
var DefaultLimits = Limits{MaxConns: 256, HeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute, MaxHeaderBytes: 64 << 10}

// withDefaults fills l's zero fields from DefaultLimits.
func (l Limits) withDefaults() Limits {
	d := DefaultLimits
	return Limits{MaxConns: positiveOr(l.MaxConns, d.MaxConns), MaxHeaderBytes: positiveOr(l.MaxHeaderBytes, d.MaxHeaderBytes),
		HeaderTimeout: positiveOr(l.HeaderTimeout, d.HeaderTimeout), IdleTimeout: positiveOr(l.IdleTimeout, d.IdleTimeout)}
}

// positiveOr is v when it is positive, else d.
func positiveOr[T int | time.Duration](v, d T) T {
	if v > 0 {
		return v
	}
	return d
}

// Decision is one connection or request the proxy decided.
type Decision = sandbox.EgressDecision

// The verdicts of a Decision.
const (
	Allowed = "allowed"
	Denied  = "denied"
	Audited = "audited" // allowed by enforcement: audit, which enforce would deny
)

// Proxy is one sandbox's egress proxy.
type Proxy struct {
	cfg  Config
	gp   *goproxy.ProxyHttpServer
	tr   *http.Transport
	dial func(ctx context.Context, network, addr string) (net.Conn, error) // tests watch it

	mu       sync.Mutex
	rules    []policy.NetworkPolicy
	bindings []Binding
	gen      uint64 // counts SetRules
	live     map[*flow]struct{}
	servers  map[*http.Server]struct{}
	closed   bool
	conns    int // open client connections
}

// New makes a proxy; Serve puts it to work.
func New(cfg Config) (*Proxy, error) {
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = 10 * time.Second
	}
	cfg.Limits = cfg.Limits.withDefaults()
	pins := make(map[string][]netip.Addr, len(cfg.Hosts))
	for name, addrs := range cfg.Hosts { // names are matched lower-case, without a trailing dot
		pins[strings.TrimSuffix(strings.ToLower(name), ".")] = slices.Clone(addrs)
	}
	cfg.Hosts = pins
	p := &Proxy{cfg: cfg, rules: slices.Clone(cfg.Rules), bindings: slices.Clone(cfg.Bindings), live: map[*flow]struct{}{}, servers: map[*http.Server]struct{}{}}
	d := &net.Dialer{Timeout: cfg.DialTimeout}
	p.dial = d.DialContext
	p.tr = &http.Transport{
		Proxy:               nil, // never the gateway's own proxy settings
		DialContext:         p.dialChecked,
		TLSClientConfig:     &tls.Config{RootCAs: cfg.RootCAs},
		MaxIdleConns:        32,
		MaxIdleConnsPerHost: 8,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true, // bodies pass as the server sends them
	}
	gp := goproxy.NewProxyHttpServer()
	gp.Logger = log.New(io.Discard, "", 0)
	gp.Tr = p.tr
	gp.ConnectDial = nil
	gp.KeepAcceptEncoding = true
	gp.NonproxyHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "corral egress proxy: send proxy requests (an absolute URL, or CONNECT)", http.StatusBadRequest)
	})
	gp.OnRequest().HandleConnectFunc(p.onConnect)
	gp.OnRequest().DoFunc(p.onRequest)
	gp.OnResponse().DoFunc(p.onResponse)
	p.gp = gp
	return p, nil
}

// Serve serves the proxy on l until l is closed or the proxy is, then
// closes the connections l accepted (their CONNECT tunnels excepted). It
// may be called for several listeners at once.
func (p *Proxy) Serve(l net.Listener) error {
	srv := &http.Server{
		Handler:           http.HandlerFunc(p.serveHTTP),
		ReadHeaderTimeout: p.cfg.Limits.HeaderTimeout,
		IdleTimeout:       p.cfg.Limits.IdleTimeout,
		MaxHeaderBytes:    p.cfg.Limits.MaxHeaderBytes,
		ErrorLog:          log.New(io.Discard, "", 0),
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, connKey{}, c)
		},
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return net.ErrClosed
	}
	p.servers[srv] = struct{}{}
	p.mu.Unlock()
	err := srv.Serve(listener{Listener: l, p: p})
	_ = srv.Close() // its clients' connections go with it (tunnels stay, until SetRules or Close)
	p.mu.Lock()
	delete(p.servers, srv)
	p.mu.Unlock()
	if errors.Is(err, http.ErrServerClosed) || errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// SetRules replaces the rules at once: what follows is decided by them,
// and open connections, tunnels and requests they no longer allow are
// closed (each reported as a denied Decision) before it returns.
func (p *Proxy) SetRules(rules []policy.NetworkPolicy) {
	rules = slices.Clone(rules)
	p.mu.Lock()
	p.rules = rules
	p.gen++
	var doomed []*flow
	var why []result
	for f := range p.live {
		if r := judge(rules, f, p.cfg.Deny); r.verdict == Denied {
			delete(p.live, f)
			doomed, why = append(doomed, f), append(why, r)
		}
	}
	p.mu.Unlock()
	p.tr.CloseIdleConnections()
	for i, f := range doomed {
		f.kill()
		why[i].reason = "closed by new rules: " + why[i].reason
		p.emit(f, why[i])
	}
}

// Close stops every Serve and closes every connection.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	servers := make([]*http.Server, 0, len(p.servers))
	for s := range p.servers {
		servers = append(servers, s)
	}
	flows := make([]*flow, 0, len(p.live))
	for f := range p.live {
		flows = append(flows, f)
	}
	clear(p.live)
	p.mu.Unlock()
	for _, s := range servers {
		_ = s.Close()
	}
	for _, f := range flows {
		f.kill()
	}
	p.tr.CloseIdleConnections()
	return nil
}

// flow is an open tunnel, or a request in flight, that SetRules re-decides.
type flow struct {
	host         string
	port         int
	addr         netip.Addr
	method, path string // a request's (the path as sent); "" for a tunnel
	override     string // a request's method override header, if any
	upgrade      string // a request's Upgrade header, if any
	tunnel       bool
	plain        bool // a tunnel spliced without inspection
	kill         func()
}

// result is a decision before it is reported.
type result struct {
	m       match
	verdict string
	reason  string
}

// judge decides f on rules: host and port, its address when known, and a
// request's method and path on an inspected endpoint.
func judge(rules []policy.NetworkPolicy, f *flow, deny []netip.Addr) result {
	m, ok := findEndpoint(rules, f.host, f.port)
	if !ok {
		return result{verdict: Denied, reason: fmt.Sprintf("no network policy allows %s port %d", f.host, f.port)}
	}
	r := result{m: m, verdict: Allowed, reason: fmt.Sprintf("network_policies.%s.endpoints[%d]", m.policy, m.index)}
	if f.addr.IsValid() {
		if err := CheckAddr(f.addr, m.endpoint.AllowedIPs, deny); err != nil {
			return result{m: m, verdict: Denied, reason: err.Error()}
		}
	}
	if f.plain && m.endpoint.Inspects() {
		return result{m: m, verdict: Denied, reason: r.reason + " now inspects requests; a plain tunnel cannot be"}
	}
	if f.method != "" && m.endpoint.Inspects() {
		ok, why := m.allowsRequest(f)
		r.reason = why
		switch {
		case !ok && m.endpoint.Enforcement == policy.Audit:
			r.verdict = Audited
		case !ok:
			r.verdict = Denied
		}
	}
	return r
}

// decide judges f on the rules in force and returns the generation they
// are of.
func (p *Proxy) decide(f *flow) (result, uint64) {
	p.mu.Lock()
	rules, gen := p.rules, p.gen
	p.mu.Unlock()
	return judge(rules, f, p.cfg.Deny), gen
}

// register adds f to the flows SetRules re-decides, unless the rules
// changed since gen and no longer allow it, or the proxy is closed.
func (p *Proxy) register(f *flow, gen uint64) (result, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return result{verdict: Denied, reason: "the proxy is closed"}, false
	}
	if gen != p.gen {
		if r := judge(p.rules, f, p.cfg.Deny); r.verdict == Denied {
			return r, false
		}
	}
	p.live[f] = struct{}{}
	return result{}, true
}

func (p *Proxy) unregister(f *flow) {
	p.mu.Lock()
	delete(p.live, f)
	p.mu.Unlock()
}

// emit reports a decision: every refusal and audit, allowed ones when
// LogAllowed.
func (p *Proxy) emit(f *flow, r result) {
	if p.cfg.OnDecision == nil || (r.verdict == Allowed && !p.cfg.LogAllowed) {
		return
	}
	p.cfg.OnDecision(Decision{Time: time.Now(), Sandbox: p.cfg.Sandbox, Host: clip(f.host, maxHostLen), Port: f.port, Addr: f.addr,
		Method: clip(f.method, maxMethodLen), Path: clip(f.path, maxPathLen), Verdict: r.verdict, Policy: r.m.policy,
		Reason: clip(r.reason, maxReasonLen)})
}

// What a Decision keeps of a request, at most: a sandbox chooses the
// host, method and path it sends, and a reason may quote them.
const (
	maxHostLen   = 256
	maxMethodLen = 32
	maxPathLen   = 1024
	maxReasonLen = 2048
)

// clip cuts s to at most n bytes (on a UTF-8 boundary), saying how much
// was cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s…(%d bytes more)", s[:cut], len(s)-cut)
}

// resolve returns the addresses of host: itself for an IP address, its
// pins, or what the resolver answers.
func (p *Proxy) resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{a}, nil
	}
	if pinned, ok := p.cfg.Hosts[host]; ok {
		return pinned, nil
	}
	if p.cfg.Resolver != nil {
		return p.cfg.Resolver(ctx, host)
	}
	return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
}

// admit decides a new flow completely: host and port, then every address
// the name resolves to. It returns the addresses that may be dialed (the
// flow's addr is the first) and the result; emitted unless allowed.
func (p *Proxy) admit(ctx context.Context, f *flow) ([]netip.Addr, result, uint64) {
	r, gen := p.decide(&flow{host: f.host, port: f.port})
	if r.verdict == Denied {
		p.emit(f, r)
		return nil, r, gen
	}
	addrs, err := p.resolve(ctx, f.host)
	if err != nil || len(addrs) == 0 {
		r = result{m: r.m, verdict: Denied, reason: fmt.Sprintf("cannot resolve %s: %v", f.host, err)}
		p.emit(f, r)
		return nil, r, gen
	}
	var ok []netip.Addr
	var refusal error
	for _, a := range addrs {
		if err := CheckAddr(a, r.m.endpoint.AllowedIPs, p.cfg.Deny); err != nil {
			refusal = cmpOr(refusal, err)
			continue
		}
		ok = append(ok, a)
	}
	if len(ok) == 0 {
		f.addr = addrs[0]
		r = result{m: r.m, verdict: Denied, reason: refusal.Error()}
		p.emit(f, r)
		return nil, r, gen
	}
	f.addr = ok[0]
	r, gen = p.decide(f) // now with the address, and a request's method and path
	p.emit(f, r)
	return ok, r, gen
}

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// forbidden is the 403 answer to a refused request or CONNECT. It closes
// the connection: a sandbox cannot keep a refused one for its next try.
func forbidden(req *http.Request, reason string) *http.Response {
	resp := goproxy.NewResponse(req, goproxy.ContentTypeText, http.StatusForbidden, "corral egress: denied: "+clip(reason, maxReasonLen)+"\n")
	resp.Header.Set("X-Corral-Egress", "denied")
	resp.Header.Set("Connection", "close")
	resp.Close = true
	return resp
}

// hostPort splits a request's destination into a lower-case host and a
// port, defaultPort when none is given.
func hostPort(hostport string, defaultPort int) (string, int, error) {
	host, portText, err := net.SplitHostPort(hostport)
	if err != nil {
		host, portText = hostport, strconv.Itoa(defaultPort)
	}
	port, perr := strconv.Atoi(portText)
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	if perr != nil || port < 1 || port > 65535 || host == "" {
		return "", 0, fmt.Errorf("%q is not a host and port", hostport)
	}
	if a, err := netip.ParseAddr(host); err == nil {
		host = a.Unmap().String()
	}
	return host, port, nil
}

type connKey struct{}

// listener wraps a listener's connections so that closing one tells the
// proxy (MITM tunnels are flows as long as their connection lives), and
// closes at once the connections past the proxy's limits.
type listener struct {
	net.Listener
	p *Proxy
}

func (l listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		release, refusal := l.p.takeConn()
		if refusal != "" {
			_ = c.Close()
			l.p.emit(&flow{}, result{verdict: Denied, reason: refusal})
			continue
		}
		return &clientConn{Conn: c, onClose: []func(){release}}, nil
	}
}

// takeConn counts a new client connection against the proxy's limit and
// the shared budget: it returns the function that gives it back, or why
// the connection is refused.
func (p *Proxy) takeConn() (release func(), refusal string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns >= p.cfg.Limits.MaxConns {
		return nil, fmt.Sprintf("too many connections: the sandbox has %d open to the proxy (the limit, egress max_connections)", p.conns)
	}
	if p.cfg.Budget != nil && !p.cfg.Budget.take() {
		return nil, fmt.Sprintf("too many connections: the gateway's egress proxies hold %d, all it can (egress budget)", p.cfg.Budget.size)
	}
	p.conns++
	return sync.OnceFunc(func() {
		p.mu.Lock()
		p.conns--
		p.mu.Unlock()
		if p.cfg.Budget != nil {
			p.cfg.Budget.give()
		}
	}), ""
}

// Budget is a number of connections that several proxies share.
type Budget struct {
	size int
	used atomic.Int64
}

// NewBudget returns a budget of n connections.
func NewBudget(n int) *Budget { return &Budget{size: n} }

func (b *Budget) take() bool {
	if b.used.Add(1) > int64(b.size) {
		b.used.Add(-1)
		return false
	}
	return true
}

func (b *Budget) give() { b.used.Add(-1) }

// clientConn is a sandbox client's connection to the proxy.
type clientConn struct {
	net.Conn
	mu      sync.Mutex
	closed  bool
	onClose []func()
}

// Close closes the connection and runs what whenClosed added, once.
func (c *clientConn) Close() error {
	err := c.Conn.Close()
	c.mu.Lock()
	fs := c.onClose
	c.onClose, c.closed = nil, true
	c.mu.Unlock()
	for _, f := range fs {
		f()
	}
	return err
}

// whenClosed runs f when the connection is closed (at once if it is).
func (c *clientConn) whenClosed(f func()) {
	c.mu.Lock()
	if !c.closed {
		c.onClose = append(c.onClose, f)
		f = nil
	}
	c.mu.Unlock()
	if f != nil {
		f()
	}
}

// SetBindings replaces the sandbox's credentials: what follows uses them
// (a new incarnation's placeholders, a policy's new bindings).
func (p *Proxy) SetBindings(bindings []Binding) {
	p.mu.Lock()
	p.bindings = slices.Clone(bindings)
	p.mu.Unlock()
}

// Bindings returns the credentials in force.
func (p *Proxy) Bindings() []Binding {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.bindings
}

// Rules returns the rules in force.
func (p *Proxy) Rules() []policy.NetworkPolicy {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.rules)
}
