package egress

import (
	"bufio"
	"bytes"
	"context"
	"crypto/hmac"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/corral-sandbox/corral/internal/connqueue"
	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/policy"
)

// tokenRole is the placeholder role of an incarnation's proxy token: no
// credential has an empty name, so no credential's placeholder is one.
const tokenRole = "egress proxy token"

// maxUnrouted bounds the connections a Shared reads the first request of
// at once (before it knows whose they are), and maxUnroutedPerIP those
// of one address, so that one sandbox cannot hold them all: past them,
// new ones are closed.
const (
	maxUnrouted      = 256
	maxUnroutedPerIP = 32
)

// Shared serves the proxies of sandboxes away from the gateway's host (a
// cluster's Pods) on one listener that they reach over the network. Each
// incarnation is known by the token in the user information of its proxy
// URL (Proxy-Authorization, basic): a connection goes to the proxy of
// the incarnation its first request names, with that sandbox's rules and
// credentials, as Attach serves one inside a network namespace. A request
// without a token of a served incarnation gets 407 and the connection
// closes. It implements driver.SharedEgress.
type Shared struct {
	s    *Sandboxes
	ln   net.Listener
	addr netip.AddrPort

	mu       sync.Mutex
	unrouted map[netip.Addr]int // connections not routed yet, by their address
	total    int
}

// Share serves sandboxes' proxies on ln, which they reach at addr. Close
// stops it.
func (s *Sandboxes) Share(ln net.Listener, addr netip.AddrPort) (driver.SharedEgress, error) {
	if s.Placeholder == nil {
		return nil, errors.New("egress: a shared proxy needs the gateway's placeholders for its tokens")
	}
	sh := &Shared{s: s, ln: ln, addr: addr, unrouted: map[netip.Addr]int{}}
	go sh.serve()
	return sh, nil
}

// Addr is where the sandboxes reach the proxy.
func (sh *Shared) Addr() netip.AddrPort { return sh.addr }

// Close stops accepting connections; the sandboxes' proxies stay (Forget
// closes one).
func (sh *Shared) Close() error { return sh.ln.Close() }

// Trust returns sandbox id's egress CA certificate and the bundle of the
// host's CAs and it, made once (see Sandboxes.Prepare).
func (sh *Shared) Trust(id string) (ca, bundle []byte, err error) {
	trust, err := sh.s.Prepare(id)
	if err != nil {
		return nil, nil, err
	}
	if ca, err = os.ReadFile(filepath.Join(trust, driver.CAFile)); err != nil {
		return nil, nil, err
	}
	if bundle, err = os.ReadFile(filepath.Join(trust, driver.BundleFile)); err != nil {
		return nil, nil, err
	}
	return ca, bundle, nil
}

// Env is incarnation ref's environment for its egress: the proxy at Addr
// with the incarnation's token, the trust bundle, and a placeholder in
// each variable its credentials name.
func (sh *Shared) Env(ref driver.Ref, creds []policy.Credential) ([]string, error) {
	proxy := fmt.Sprintf("http://%s:%s@%s", user(ref), sh.token(ref), sh.addr)
	return sh.s.env(driver.EgressEnvAt(sh.addr.String(), proxy), ref, creds), nil
}

// Admit serves incarnation ref: its token is let in from now on, an
// earlier incarnation's no longer (and the connections let in with it
// are closed).
func (sh *Shared) Admit(ctx context.Context, ref driver.Ref) error {
	b, err := sh.s.box(ctx, ref.ID)
	if err != nil {
		return err
	}
	sh.s.mu.Lock()
	if q, ok := b.ln.(*connqueue.Queue); ok && b.gen == ref.Generation && !q.Ended() {
		sh.s.mu.Unlock()
		return nil
	}
	q := connqueue.New(sh.ln.Addr(), nil)
	old := b.ln
	b.ln, b.ns, b.gen = q, [2]uint64{}, ref.Generation
	creds := b.creds
	sh.s.mu.Unlock()
	if old != nil {
		old.Close()
	}
	b.proxy.SetBindings(sh.s.bindings(ref, creds))
	go func() {
		_ = b.proxy.Serve(q)
		sh.s.mu.Lock()
		if b.ln == q {
			b.ln = nil
		}
		sh.s.mu.Unlock()
	}()
	return nil
}

// user is the user name of incarnation ref's proxy URL: "ID.GENERATION".
func user(ref driver.Ref) string { return ref.ID + "." + strconv.FormatInt(ref.Generation, 10) }

// token is incarnation ref's password: a placeholder, an HMAC of the
// gateway's, so that it is kept nowhere and differs for every
// incarnation.
func (sh *Shared) token(ref driver.Ref) string {
	return sh.s.Placeholder(ref.ID, ref.Generation, "", tokenRole)
}

func (sh *Shared) serve() {
	for {
		c, err := sh.ln.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil { // out of file descriptors, say: the next may do
			time.Sleep(5 * time.Millisecond)
			continue
		}
		from := remoteAddr(c)
		if !sh.take(from) {
			c.Close()
			continue
		}
		go func() {
			defer sh.give(from)
			sh.route(c)
		}()
	}
}

// remoteAddr is the address c comes from.
func remoteAddr(c net.Conn) netip.Addr {
	ap, _ := netip.ParseAddrPort(c.RemoteAddr().String())
	return ap.Addr().Unmap()
}

// take counts a connection from an address until it is routed; false
// past the bounds.
func (sh *Shared) take(from netip.Addr) bool {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.total >= maxUnrouted || sh.unrouted[from] >= maxUnroutedPerIP {
		return false
	}
	sh.total++
	sh.unrouted[from]++
	return true
}

func (sh *Shared) give(from netip.Addr) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.total--
	if sh.unrouted[from]--; sh.unrouted[from] == 0 {
		delete(sh.unrouted, from)
	}
}

// route reads c's first request, bounded in time and size, and hands c,
// that request included, to the proxy of the incarnation it names.
func (sh *Shared) route(c net.Conn) {
	lim := sh.s.Limits.withDefaults()
	_ = c.SetReadDeadline(time.Now().Add(lim.HeaderTimeout))
	var seen bytes.Buffer
	br := bufio.NewReader(io.TeeReader(io.LimitReader(c, int64(lim.MaxHeaderBytes)), &seen))
	req, err := http.ReadRequest(br)
	if err != nil {
		c.Close()
		return
	}
	q := sh.incarnation(req)
	if q == nil {
		_, _ = io.WriteString(c, "HTTP/1.1 407 Proxy Authentication Required\r\n"+
			"Proxy-Authenticate: Basic realm=\"corral egress\"\r\nContent-Type: text/plain\r\nConnection: close\r\nContent-Length: 79\r\n\r\n"+
			"corral egress proxy: no token of a running sandbox (use its HTTP_PROXY as is)\n")
		c.Close()
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	if q.Put(context.Background(), &replayed{Conn: c, r: io.MultiReader(&seen, c)}) != nil {
		c.Close()
	}
}

// incarnation is the queue of the served incarnation whose token req
// carries, or nil.
func (sh *Shared) incarnation(req *http.Request) *connqueue.Queue {
	name, pass, ok := proxyAuth(req)
	if !ok {
		return nil
	}
	id, gen, ok := strings.Cut(name, ".")
	g, err := strconv.ParseInt(gen, 10, 64)
	if !ok || err != nil {
		return nil
	}
	ref := driver.Ref{ID: id, Generation: g}
	if !hmac.Equal([]byte(pass), []byte(sh.token(ref))) {
		return nil
	}
	sh.s.mu.Lock()
	defer sh.s.mu.Unlock()
	b := sh.s.boxes[id]
	if b == nil || b.gen != g {
		return nil
	}
	q, _ := b.ln.(*connqueue.Queue)
	return q
}

// proxyAuth is the basic credentials of req's Proxy-Authorization.
func proxyAuth(req *http.Request) (user, pass string, ok bool) {
	r := &http.Request{Header: http.Header{"Authorization": req.Header.Values("Proxy-Authorization")}}
	return r.BasicAuth()
}

// replayed is a connection whose first bytes were read already: they are
// read again first.
type replayed struct {
	net.Conn
	r io.Reader
}

func (c *replayed) Read(p []byte) (int, error) { return c.r.Read(p) }
