package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc/credentials"
)

// What the TLS listener lets a connection take before it is served: the
// handshake's time, and how many handshakes run at once (one more is
// closed at once).
const (
	handshakeTimeout = 10 * time.Second
	maxHandshakes    = 256
)

// tlsSplit accepts the TLS listener's connections, completes each
// handshake (mutual TLS: a client certificate of the gateway's CA first),
// and hands it to the gRPC server when it negotiated HTTP/2 (ALPN h2) or
// to the HTTP server (MCP) otherwise.
type tlsSplit struct {
	tcp        net.Listener
	cfg        *tls.Config
	log        *slog.Logger
	h2, http1  *connQueue
	handshakes chan struct{}
}

func newTLSSplit(tcp net.Listener, cfg *tls.Config, log *slog.Logger) *tlsSplit {
	cfg = cfg.Clone()
	cfg.NextProtos = []string{"h2", "http/1.1"}
	s := &tlsSplit{tcp: tcp, cfg: cfg, log: log, handshakes: make(chan struct{}, maxHandshakes)}
	s.h2, s.http1 = newConnQueue(tcp.Addr(), tcp.Close), newConnQueue(tcp.Addr(), tcp.Close)
	go s.run()
	return s
}

func (s *tlsSplit) run() {
	defer s.h2.end()
	defer s.http1.end()
	for {
		c, err := s.tcp.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil { // out of descriptors, say: the next may work
			s.log.Warn("accept on the TLS listener", "err", err)
			time.Sleep(100 * time.Millisecond)
			continue
		}
		select {
		case s.handshakes <- struct{}{}:
			go s.route(c)
		default:
			c.Close()
		}
	}
}

// route completes c's handshake and queues it for its server.
func (s *tlsSplit) route(c net.Conn) {
	defer func() { <-s.handshakes }()
	tc := tls.Server(c, s.cfg)
	ctx, cancel := context.WithTimeout(context.Background(), handshakeTimeout)
	defer cancel()
	if err := tc.HandshakeContext(ctx); err != nil {
		c.Close()
		return
	}
	q := s.http1
	if tc.ConnectionState().NegotiatedProtocol == "h2" {
		q = s.h2
	}
	if q.put(context.Background(), tc) != nil {
		tc.Close()
	}
}

// connQueue is a net.Listener of the connections handed to it (by
// tlsSplit, or a front end inside the gateway); closing it runs closed,
// when set (tlsSplit's closes the TCP listener, which ends both of its).
type connQueue struct {
	addr   net.Addr
	closed func() error
	conns  chan net.Conn
	done   chan struct{}
	once   sync.Once
}

func newConnQueue(addr net.Addr, closed func() error) *connQueue {
	return &connQueue{addr: addr, closed: closed, conns: make(chan net.Conn), done: make(chan struct{})}
}

// put hands c to the queue's Accept, unless the queue ends or ctx does
// first (then the caller keeps c).
func (q *connQueue) put(ctx context.Context, c net.Conn) error {
	select {
	case q.conns <- c:
		return nil
	case <-q.done:
		return net.ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (q *connQueue) end() { q.once.Do(func() { close(q.done) }) }

// Accept implements net.Listener.
func (q *connQueue) Accept() (net.Conn, error) {
	select {
	case c := <-q.conns:
		return c, nil
	case <-q.done:
		return nil, net.ErrClosed
	}
}

// Close implements net.Listener.
func (q *connQueue) Close() error {
	q.end()
	if q.closed == nil {
		return nil
	}
	return q.closed()
}

// Addr implements net.Listener.
func (q *connQueue) Addr() net.Addr { return q.addr }

// handshaken are the gRPC server's credentials on tlsSplit's connections,
// whose TLS handshake is done: the connection's TLS state, as gRPC's own
// TLS credentials give it.
type handshaken struct{}

func (handshaken) ServerHandshake(c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	tc, ok := c.(*tls.Conn)
	if !ok {
		return nil, nil, errors.New("not a TLS connection")
	}
	return tc, credentials.TLSInfo{State: tc.ConnectionState(),
		CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}}, nil
}

func (handshaken) ClientHandshake(context.Context, string, net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("the TLS listener's credentials are the server's")
}

func (handshaken) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "tls", SecurityVersion: "1.3"}
}
func (handshaken) Clone() credentials.TransportCredentials { return handshaken{} }
func (handshaken) OverrideServerName(string) error         { return nil }
