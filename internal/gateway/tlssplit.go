package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"time"

	"google.golang.org/grpc/credentials"

	"github.com/corral-sandbox/corral/internal/connqueue"
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
	h2, http1  *connqueue.Queue
	handshakes chan struct{}
}

func newTLSSplit(tcp net.Listener, cfg *tls.Config, log *slog.Logger) *tlsSplit {
	cfg = cfg.Clone()
	cfg.NextProtos = []string{"h2", "http/1.1"}
	s := &tlsSplit{tcp: tcp, cfg: cfg, log: log, handshakes: make(chan struct{}, maxHandshakes)}
	s.h2, s.http1 = connqueue.New(tcp.Addr(), tcp.Close), connqueue.New(tcp.Addr(), tcp.Close)
	go s.run()
	return s
}

func (s *tlsSplit) run() {
	defer s.h2.End()
	defer s.http1.End()
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
	if q.Put(context.Background(), tc) != nil {
		tc.Close()
	}
}

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
