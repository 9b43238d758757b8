package egress

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/internal/testenv"
)

// openFiles counts this process's descriptors.
func openFiles(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("cannot count descriptors: %v", err)
	}
	return len(ents)
}

// A sandbox that opens connection after connection to its proxy, each
// with a refused request it never reads the end of, holds at most
// MaxConns of the gateway's descriptors: a refused request closes its
// connection, and a connection past the limit is closed at once and
// reported.
func TestConnectionFloodIsBounded(t *testing.T) {
	const limit = 16
	w := newWorld(t, readOnlyRules, func(c *Config) { c.Limits.MaxConns, c.Limits.HeaderTimeout = limit, time.Hour })
	before := openFiles(t)
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range 300 { // opened and kept, as the attack does
		c, err := net.Dial("tcp", w.proxyURL.Host)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	// The proxy's side of at most limit of them stays open (and the
	// listener's backlog, which the kernel holds, not the gateway).
	testenv.Eventually(t, 20*time.Second, func() error {
		if grown := openFiles(t) - before - len(conns); grown > limit+8 {
			return fmt.Errorf("the proxy holds %d descriptors for 300 connections; want at most %d", grown, limit+8)
		}
		return nil
	})
	refusedForLimit := 0
	for _, d := range w.decided() {
		if d.Verdict == Denied && strings.Contains(d.Reason, "too many connections") {
			refusedForLimit++
		}
	}
	if refusedForLimit == 0 {
		t.Error("no decision says a connection was refused for the limit")
	}
	for _, c := range conns {
		c.Close()
	}
	conns = nil

	// Once those are closed, a refused request gets its 403 and its
	// connection closed; an allowed one still works.
	c, err := net.Dial("tcp", w.proxyURL.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	testenv.Eventually(t, 20*time.Second, func() error {
		fmt.Fprintf(c, "GET http://127.0.0.1:999/x HTTP/1.1\r\nHost: 127.0.0.1:999\r\n\r\n")
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			c.Close()
			if c, err = net.Dial("tcp", w.proxyURL.Host); err != nil {
				t.Fatal(err)
			}
			return fmt.Errorf("no answer yet (the closed connections may not be counted out yet): %v", err)
		}
		io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("a request to 127.0.0.1:999: %s; want 403", resp.Status)
		}
		return nil
	})
	if n, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("after a refused request the connection is still open (read %d, %v); want it closed", n, err)
	}
	w.expect(w.client(w.sandboxCA), "GET", "http://allowed.test:HTTP/ok", 200, "hello GET /ok")
}

// A refused request's path is cut before it is kept, logged or sent
// back, and a header bigger than the limit is refused by the server.
func TestRefusalsAreKeptAndLoggedBounded(t *testing.T) {
	var log bytes.Buffer
	var mu sync.Mutex
	var past []Decision
	s := &Sandboxes{Dir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(&log, nil)),
		Lookup:   func(context.Context, string) (Network, error) { return Network{Name: "flood"}, nil },
		OnDenied: func(d Decision) { mu.Lock(); past = append(past, d); mu.Unlock() }}
	b, err := s.box(context.Background(), "id1")
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- b.proxy.Serve(l) }()
	defer func() { s.Forget("id1"); <-served }()
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: l.Addr().String()})}}
	start := time.Now()

	huge := "/" + strings.Repeat("a", 1<<20)
	resp, err := client.Get("http://127.0.0.1:999" + huge)
	if err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
			t.Errorf("a 1 MiB path: %s; want 431", resp.Status)
		}
	}
	long := "/" + strings.Repeat("b", 60<<10) // under the header limit
	for range 400 {
		resp, err := client.Get("http://127.0.0.1:999" + long)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden || len(body) > 4<<10 {
			t.Fatalf("a refused request: %s with %d bytes of body; want 403 and a short one", resp.Status, len(body))
		}
	}
	mu.Lock()
	for _, d := range past {
		if len(d.Path) > maxPathLen+32 || len(d.Reason) > maxReasonLen+32 || d.SandboxID != "id1" {
			t.Fatalf("a decision keeps a path of %d bytes and a reason of %d (sandbox %q)", len(d.Path), len(d.Reason), d.SandboxID)
		}
	}
	if len(past) < 400 {
		t.Errorf("%d decisions passed on for 400 refusals", len(past))
	}
	mu.Unlock()
	// At most loggedPerSecond lines a second are logged, each with a cut
	// path; the rest are counted.
	seconds := int(time.Since(start)/time.Second) + 2
	if n := strings.Count(log.String(), "egress denied"); n == 0 || n > loggedPerSecond*seconds || log.Len() > n*4<<10 {
		t.Errorf("the log has %d refusal lines, %d bytes, for 400 refusals of 60 KiB paths in %d s; want at most %d a second, each short",
			n, log.Len(), seconds, loggedPerSecond)
	}
}
