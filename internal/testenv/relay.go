package testenv

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"regexp"
	"sync"
	"testing"
	"time"
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
	carryOut bool // held requests are passed on at Release even when their caller went away
	carrying sync.WaitGroup
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

// HoldAndCarryOut holds as Hold does, but a held request whose caller
// goes away is still passed on at Release, as the engine carries out a
// request it has read (a container create) after its client left.
func (r *Relay) HoldAndCarryOut(pattern string) {
	r.Hold(pattern)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.carryOut = true
}

// CarriedOut waits until the requests passed on after their caller went
// away (HoldAndCarryOut) have had the engine's answer.
func (r *Relay) CarriedOut() { r.carrying.Wait() }

// Release lets held requests through and stops holding.
func (r *Relay) Release() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.released != nil {
		close(r.released)
	}
	r.hold, r.released, r.carryOut = nil, nil, false
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
	hold, released, carryOut := r.hold, r.released, r.carryOut
	r.seen = append(r.seen, req.Method+" "+req.RequestURI)
	held := hold != nil && hold.MatchString(line)
	if held && carryOut {
		r.carrying.Add(1)
	}
	r.mu.Unlock()
	if !held {
		r.proxy.ServeHTTP(w, req)
		return
	}
	if carryOut {
		defer r.carrying.Done()
		body, err := io.ReadAll(req.Body) // before the caller can go
		if err != nil {
			return
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	select {
	case r.held <- line:
	default:
	}
	if !carryOut {
		select {
		case <-released:
			r.proxy.ServeHTTP(w, req)
		case <-req.Context().Done():
		}
		return
	}
	<-released
	// A context of its own, never cancelled by the caller's going: one
	// without Done would make the proxy watch the connection instead.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(req.Context()), time.Minute)
	defer cancel()
	sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
	r.proxy.ServeHTTP(sw, req.WithContext(ctx))
	r.t.Logf("relay: %s carried out: %d", line, sw.status)
}

// statusWriter keeps the status a handler wrote.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}
