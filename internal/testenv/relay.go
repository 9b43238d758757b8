package testenv

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"regexp"
	"sync"
	"testing"
)

// Relay is a Docker Engine API relay on a Unix socket for tests: it passes
// requests to the real engine, and can hold the ones that match a pattern
// (to kill a gateway mid-call) or go away altogether (an engine that dies).
type Relay struct {
	Path string // the relay's socket: give unix://Path as the Docker host

	t      testing.TB
	target string
	proxy  *httputil.ReverseProxy

	mu       sync.Mutex
	hold     *regexp.Regexp
	released chan struct{}
	held     chan string // a held request's "METHOD path", once per hold
	seen     []string    // every request's "METHOD request-URI", as sent
	srv      *http.Server
}

// NewRelay starts a relay to the engine socket target (/var/run/docker.sock).
func NewRelay(t testing.TB, target string) *Relay {
	r := &Relay{Path: shortSocketPath(t), t: t, target: target, held: make(chan string, 16)}
	r.proxy = &httputil.ReverseProxy{
		Rewrite:       func(pr *httputil.ProxyRequest) { pr.SetURL(&url.URL{Scheme: "http", Host: "docker"}) },
		FlushInterval: -1, // stream events and logs as they come
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", target)
		}},
	}
	r.Up()
	t.Cleanup(func() { r.Release(); r.Down() })
	return r
}

// shortSocketPath is a socket path under the 108-byte limit of sun_path.
func shortSocketPath(t testing.TB) string {
	dir, err := os.MkdirTemp("", "relay")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir + "/docker.sock"
}

// Up makes the relay answer (again).
func (r *Relay) Up() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.srv != nil {
		return
	}
	os.Remove(r.Path)
	lis, err := net.Listen("unix", r.Path)
	if err != nil {
		r.t.Fatal(err)
	}
	r.srv = &http.Server{Handler: http.HandlerFunc(r.serve)}
	go r.srv.Serve(lis)
}

// Down makes the engine go away: the socket closes and every connection
// through it breaks.
func (r *Relay) Down() {
	r.mu.Lock()
	srv := r.srv
	r.srv = nil
	r.mu.Unlock()
	if srv != nil {
		srv.Close()
		os.Remove(r.Path)
	}
}

// Hold makes every request whose "METHOD path" matches pattern wait until
// Release (or until its caller goes away).
func (r *Relay) Hold(pattern string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.hold = regexp.MustCompile(pattern)
	r.released = make(chan struct{})
}

// Release lets held requests through and stops holding.
func (r *Relay) Release() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.released != nil {
		close(r.released)
	}
	r.hold, r.released = nil, nil
}

// Held waits for a request to be held and returns its "METHOD path".
func (r *Relay) Held(ctx context.Context) (string, error) {
	select {
	case s := <-r.held:
		return s, nil
	case <-ctx.Done():
		return "", errors.New("no request was held")
	}
}

// Seen returns every request the relay received, as "METHOD request-URI"
// exactly as the client sent it (escapes included), oldest first.
func (r *Relay) Seen() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.seen...)
}

func (r *Relay) serve(w http.ResponseWriter, req *http.Request) {
	line := req.Method + " " + req.URL.Path
	r.mu.Lock()
	hold, released := r.hold, r.released
	r.seen = append(r.seen, req.Method+" "+req.RequestURI)
	r.mu.Unlock()
	if hold != nil && hold.MatchString(line) {
		select {
		case r.held <- line:
		default:
		}
		select {
		case <-released:
		case <-req.Context().Done():
			return
		}
	}
	r.proxy.ServeHTTP(w, req)
}
