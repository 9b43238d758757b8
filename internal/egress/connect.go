package egress

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/elazarl/goproxy"
	"golang.org/x/net/http/httpguts"
)

// tunnelOf is a MITM tunnel's destination, carried by goproxy from the
// CONNECT to each request inside it.
type tunnelOf struct {
	host   string
	port   int
	client *clientConn
}

// admission is a CONNECT decided: its flow, the addresses it may dial,
// the result and the rules' generation.
type admission struct {
	f     *flow
	addrs []netip.Addr
	r     result
	gen   uint64
}

type admittedKey struct{}

// admitConnect decides a CONNECT's host, port and addresses.
func (p *Proxy) admitConnect(req *http.Request) admission {
	host, port, err := hostPort(req.URL.Host, 443)
	if err != nil {
		return admission{f: &flow{host: req.URL.Host, tunnel: true}, r: result{verdict: Denied, reason: err.Error()}}
	}
	a := admission{f: &flow{host: host, port: port, tunnel: true}}
	a.addrs, a.r, a.gen = p.admit(req.Context(), a.f)
	return a
}

// serveHTTP is the proxy's handler. A CONNECT to a pass-through endpoint
// is spliced here, where the bytes a client sent right behind its CONNECT
// are still at hand (goproxy's hijack would drop them); the rest is
// goproxy's, with the CONNECT's admission in the request's context.
func (p *Proxy) serveHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodConnect {
		p.gp.ServeHTTP(w, req)
		return
	}
	a := p.admitConnect(req)
	if hj, ok := w.(http.Hijacker); ok && a.r.verdict != Denied && !a.r.m.endpoint.Inspects() {
		conn, rw, err := hj.Hijack()
		if err != nil {
			return
		}
		early, _ := rw.Reader.Peek(rw.Reader.Buffered())
		a.f.plain = true
		p.splice(a, conn, early)
		return
	}
	p.gp.ServeHTTP(w, req.WithContext(context.WithValue(req.Context(), admittedKey{}, a)))
}

// onConnect answers a CONNECT that serveHTTP did not splice: refused with a
// 403, or intercepted (MITM) for an endpoint that inspects requests.
func (p *Proxy) onConnect(hostport string, ctx *goproxy.ProxyCtx) (*goproxy.ConnectAction, string) {
	reject := func(reason string) (*goproxy.ConnectAction, string) {
		ctx.Resp = forbidden(ctx.Req, reason)
		return goproxy.RejectConnect, hostport
	}
	a, ok := ctx.Req.Context().Value(admittedKey{}).(admission)
	if !ok {
		a = p.admitConnect(ctx.Req)
	}
	f, r, gen := a.f, a.r, a.gen
	if r.verdict == Denied {
		return reject(r.reason)
	}
	if !r.m.endpoint.Inspects() { // only when the connection cannot be hijacked
		f.plain = true
		return &goproxy.ConnectAction{Action: goproxy.ConnectHijack, Hijack: func(_ *http.Request, client net.Conn, _ *goproxy.ProxyCtx) {
			p.splice(a, client, nil)
		}}, hostport
	}
	if p.cfg.CA == nil {
		r = result{m: r.m, verdict: Denied, reason: "inspecting this endpoint needs the sandbox's CA, and the proxy has none"}
		p.emit(f, r)
		return reject(r.reason)
	}
	client, _ := ctx.Req.Context().Value(connKey{}).(*clientConn)
	if client == nil {
		return reject("internal error: the CONNECT has no connection")
	}
	f.kill = func() { _ = client.Close() }
	if r, ok := p.register(f, gen); !ok {
		p.emit(f, r)
		return reject(r.reason)
	}
	client.whenClosed(func() { p.unregister(f) })
	ctx.UserData = tunnelOf{host: f.host, port: f.port, client: client}
	return &goproxy.ConnectAction{Action: goproxy.ConnectMitm, TLSConfig: p.mitmTLS}, hostport
}

// mitmTLS is the TLS configuration shown to a client whose CONNECT is
// intercepted: a leaf certificate for the CONNECT's host, signed by the
// sandbox's CA.
func (p *Proxy) mitmTLS(hostport string, _ *goproxy.ProxyCtx) (*tls.Config, error) {
	host, _, err := hostPort(hostport, 443)
	if err != nil {
		return nil, err
	}
	leaf, err := p.cfg.CA.Leaf(host)
	if err != nil {
		return nil, err
	}
	return &tls.Config{Certificates: []tls.Certificate{*leaf}, MinVersion: tls.VersionTLS12}, nil
}

// splice connects a CONNECT's client to one of the checked addresses and
// copies bytes both ways (splice(2) between TCP sockets) until both sides
// are done or SetRules closes the tunnel.
func (p *Proxy) splice(a admission, client net.Conn, early []byte) {
	f, r := a.f, a.r
	defer client.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var up net.Conn
	killed := false
	f.kill = func() { // closes both sides before SetRules returns
		cancel()
		mu.Lock()
		killed = true
		if up != nil {
			_ = up.Close()
		}
		mu.Unlock()
		_ = client.Close()
	}
	if r, ok := p.register(f, a.gen); !ok {
		p.emit(f, r)
		_ = forbidden(&http.Request{Method: http.MethodConnect}, r.reason).Write(client)
		return
	}
	defer p.unregister(f)
	c, err := p.dialAddrs(ctx, a.addrs, r.m.endpoint.AllowedIPs, f.port)
	if err != nil {
		msg := fmt.Sprintf("corral egress: cannot reach %s port %d: %v\n", f.host, f.port, err)
		_, _ = io.WriteString(client, "HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\nContent-Length: "+strconv.Itoa(len(msg))+"\r\n\r\n"+msg)
		return
	}
	defer c.Close()
	mu.Lock()
	up = c
	gone := killed
	mu.Unlock()
	if gone {
		return
	}
	if _, err := io.WriteString(client, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	var watch func([]byte) bool
	if bindings := p.Bindings(); len(bindings) > 0 {
		s := newScanner(bindings)
		watch = func(b []byte) bool {
			found, ok := s.scan(b)
			if ok {
				p.refuseCredential(f, r, found, fmt.Sprintf("%s: credentials.%s's placeholder in a tunnel to %s port %d, which the proxy does not inspect: closed", ReasonMismatch, found.Name, f.host, f.port))
			}
			return ok
		}
	}
	pipe(client, c, early, p.checkServerName(f, r), watch)
}

// pipe copies the server's bytes to the client at once, and the client's
// (early, the bytes already read, first) to the server once hello has read
// (and passed) what the client sends first; each direction is half-closed
// when it ends, and both are closed if hello refuses. watch, when set, sees
// every byte the client sends before the server does, and closes both when
// it returns true.
func pipe(client, up net.Conn, early []byte, hello func(io.Reader) ([]byte, error), watch func([]byte) bool) {
	rc, ru := rawConn(client), rawConn(up)
	done := make(chan struct{})
	go func() { copyHalf(rc, ru); close(done) }()
	head, err := hello(io.MultiReader(bytes.NewReader(early), rc))
	if err == nil && watch != nil && watch(head) {
		err = errPlaceholderInBody
	}
	if err == nil && len(head) > 0 {
		_, err = ru.Write(head)
	}
	switch {
	case err != nil:
		_ = client.Close()
		_ = up.Close()
	case watch != nil:
		if watchedCopy(ru, rc, watch) {
			_ = client.Close()
			_ = up.Close()
		}
	default:
		copyHalf(ru, rc)
	}
	<-done
}

// watchedCopy is copyHalf through watch, in user space; it reports
// whether watch stopped it.
func watchedCopy(dst, src net.Conn, watch func([]byte) bool) bool {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if watch(buf[:n]) {
				return true
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	if hc, ok := dst.(interface{ CloseWrite() error }); ok {
		_ = hc.CloseWrite()
	} else {
		_ = dst.Close()
	}
	return false
}

// rawConn is the *net.TCPConn under a client's connection: io.Copy
// between two of them splices.
func rawConn(c net.Conn) net.Conn {
	if cc, ok := c.(*clientConn); ok {
		return cc.Conn
	}
	return c
}

func copyHalf(dst, src net.Conn) {
	_, _ = io.Copy(dst, src)
	if hc, ok := dst.(interface{ CloseWrite() error }); ok {
		_ = hc.CloseWrite()
	} else {
		_ = dst.Close()
	}
}

// checkServerName reads what a tunnel's client sends first and returns it,
// to be sent on; when it is a TLS ClientHello whose server name (SNI) is not
// the CONNECT's host, or that has none, the tunnel is refused: a
// pass-through endpoint cannot front for another name on the same server.
// (What the encrypted stream carries next, such as a Host header, it
// cannot see: an endpoint that must decide requests inspects them.)
func (p *Proxy) checkServerName(f *flow, r result) func(io.Reader) ([]byte, error) {
	return func(client io.Reader) ([]byte, error) {
		br := bufio.NewReaderSize(client, 16<<10)
		first, err := br.Peek(1)
		if err != nil {
			return nil, err
		}
		var read bytes.Buffer
		if first[0] == recordTypeHandshake {
			name, err := clientHelloName(io.TeeReader(br, &read))
			if err != nil {
				return nil, err
			}
			_, notIP := netip.ParseAddr(f.host)
			switch {
			case notIP == nil: // a CONNECT to an address: no name to compare
			case name == "":
				p.emit(f, result{m: r.m, verdict: Denied, reason: fmt.Sprintf("a TLS ClientHello without a server name, on a tunnel to %s: the server would choose the name", f.host)})
				return nil, errors.New("no server name")
			case !strings.EqualFold(strings.TrimSuffix(name, "."), f.host):
				p.emit(f, result{m: r.m, verdict: Denied, reason: fmt.Sprintf("the TLS server name %q is not the CONNECT's host %s", name, f.host)})
				return nil, errors.New("server name differs")
			}
		}
		rest, _ := br.Peek(br.Buffered())
		return append(read.Bytes(), rest...), nil
	}
}

// recordTypeHandshake is the first byte of a TLS handshake record.
const recordTypeHandshake = 22

var errHelloRead = errors.New("client hello read")

// clientHelloName reads a TLS ClientHello from r with crypto/tls and
// returns the server name it asks for.
func clientHelloName(r io.Reader) (string, error) {
	var name string
	var got bool
	err := tls.Server(helloConn{r: r}, &tls.Config{GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		name, got = h.ServerName, true
		return nil, errHelloRead
	}}).Handshake()
	if got {
		return name, nil
	}
	return "", err
}

// helloConn is a read-only connection for clientHelloName: what the TLS
// server would write is dropped.
type helloConn struct {
	net.Conn
	r io.Reader
}

func (c helloConn) Read(b []byte) (int, error)       { return c.r.Read(b) }
func (c helloConn) Write(b []byte) (int, error)      { return len(b), nil }
func (c helloConn) Close() error                     { return nil }
func (c helloConn) SetDeadline(time.Time) error      { return nil }
func (c helloConn) SetReadDeadline(time.Time) error  { return nil }
func (c helloConn) SetWriteDeadline(time.Time) error { return nil }

// dialAddrs dials the first of addrs that answers, checking each with
// CheckAddr right before: the address dialed is the address checked.
func (p *Proxy) dialAddrs(ctx context.Context, addrs []netip.Addr, allowed []netip.Prefix, port int) (net.Conn, error) {
	err := errors.New("no address")
	for _, a := range addrs {
		if cerr := CheckAddr(a, allowed, p.cfg.Deny); cerr != nil {
			err = cerr
			continue
		}
		var c net.Conn
		if c, err = p.dial(ctx, "tcp", netip.AddrPortFrom(a.Unmap(), uint16(port)).String()); err == nil {
			return c, nil
		}
	}
	return nil, err
}

// target is what a request's context carries to dialChecked: the
// addresses admit checked for it.
type target struct {
	addrs   []netip.Addr
	allowed []netip.Prefix
	port    int
}

type targetKey struct{}

// dialChecked is the upstream transport's dialer: it dials only the
// addresses admit put in the request's context, never a name.
func (p *Proxy) dialChecked(ctx context.Context, _, _ string) (net.Conn, error) {
	t, ok := ctx.Value(targetKey{}).(target)
	if !ok {
		return nil, errors.New("corral egress: a dial without checked addresses")
	}
	return p.dialAddrs(ctx, t.addrs, t.allowed, t.port)
}

// onRequest decides a plain-HTTP proxy request, or a request inside an
// intercepted tunnel: a 403, or the request sent on with its checked
// addresses and a context SetRules can cancel.
func (p *Proxy) onRequest(req *http.Request, ctx *goproxy.ProxyCtx) (*http.Request, *http.Response) {
	defaultPort := 80
	if req.URL.Scheme == "https" {
		defaultPort = 443
	}
	host, port, err := hostPort(req.URL.Host, defaultPort)
	if err != nil {
		return req, forbidden(req, err.Error())
	}
	if t, ok := ctx.UserData.(tunnelOf); ok && (t.host != host || t.port != port) {
		return req, forbidden(req, fmt.Sprintf("the request is for %s port %d, not its CONNECT's %s port %d", host, port, t.host, t.port))
	}
	if req.Host != "" { // the Host header names the server too (virtual hosts, domain fronting)
		if h, p, err := hostPort(req.Host, defaultPort); err != nil || h != host || p != port {
			return req, forbidden(req, fmt.Sprintf("the Host header %q is not the request's host %s port %d", req.Host, host, port))
		}
	}
	f := &flow{host: host, port: port, method: req.Method, path: req.URL.EscapedPath(), override: methodOverride(req)}
	if httpguts.HeaderValuesContainsToken(req.Header["Connection"], "upgrade") {
		f.upgrade = cmp.Or(req.Header.Get("Upgrade"), "an unnamed protocol")
	}
	bindings := p.Bindings()
	pl := credentialPlan{bindings: bindings}
	if len(bindings) > 0 {
		var b *Binding
		var why string
		if pl, b, why = planCredentials(bindings, f, req); b != nil {
			p.refuseCredential(f, result{}, b, why)
			return req, forbidden(req, why)
		}
	}
	addrs, r, gen := p.admit(req.Context(), f)
	if r.verdict == Denied {
		return req, forbidden(req, r.reason)
	}
	// Cutting a request closes its client's connection too: a response
	// cut short must not look complete (a chunked body would end cleanly).
	client, _ := req.Context().Value(connKey{}).(*clientConn)
	if t, ok := ctx.UserData.(tunnelOf); ok {
		client = t.client
	}
	rctx, cancel := context.WithCancel(req.Context())
	f.kill = func() { // the client's connection first: nothing may end the response cleanly
		if client != nil {
			_ = client.Close()
		}
		cancel()
	}
	if r, ok := p.register(f, gen); !ok {
		cancel()
		p.emit(f, r)
		return req, forbidden(req, r.reason)
	}
	context.AfterFunc(req.Context(), func() { p.unregister(f) })
	rctx = context.WithValue(rctx, targetKey{}, target{addrs: addrs, allowed: r.m.endpoint.AllowedIPs, port: port})
	if len(bindings) > 0 {
		ctx.RoundTripper = p.credentialTrip(f, r, pl)
	}
	return req.WithContext(rctx), nil
}

// methodOverride returns the method a request asks a server to take it
// for instead of its own (the headers and the query parameter frameworks
// honour), upper-cased; "" when it asks for none.
func methodOverride(req *http.Request) string {
	for _, h := range []string{"X-HTTP-Method-Override", "X-HTTP-Method", "X-Method-Override"} {
		if v := req.Header.Get(h); v != "" {
			return strings.ToUpper(strings.TrimSpace(v))
		}
	}
	return strings.ToUpper(req.URL.Query().Get("_method"))
}

// onResponse turns a failure to reach the server into a 502 that says why
// (goproxy would answer 500).
func (p *Proxy) onResponse(resp *http.Response, ctx *goproxy.ProxyCtx) *http.Response {
	if resp != nil || ctx.Error == nil {
		return resp
	}
	return goproxy.NewResponse(ctx.Req, goproxy.ContentTypeText, http.StatusBadGateway,
		fmt.Sprintf("corral egress: cannot reach %s: %v\n", ctx.Req.URL.Host, ctx.Error))
}
