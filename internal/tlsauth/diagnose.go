package tlsauth

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"
)

// Diagnose explains why a connection to a gateway fails. In TLS 1.3 the
// gateway judges the client certificate after the client thinks the
// handshake is done, so an RPC may only see a broken connection; Diagnose
// shakes hands again and waits for the gateway's verdict (its TLS alert).
// It returns nil when the gateway accepts the client.
func Diagnose(addr string, cfg *tls.Config) error {
	cfg = cfg.Clone()
	cfg.NextProtos = []string{"h2"}
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return explain(err)
	}
	defer conn.Close()
	// A server that accepted us waits for the client's HTTP/2 preface and
	// says nothing; one that refused us sends an alert at once.
	_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	_, err = conn.Read(make([]byte, 1))
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return nil
	}
	if err == nil {
		return nil
	}
	return explain(err)
}

func explain(err error) error {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "certificate required"):
		return fmt.Errorf("the gateway requires a client certificate and got none (%v): give --cert and --key in the context", err)
	case strings.Contains(msg, "expired certificate"):
		return fmt.Errorf("the gateway refused this client certificate: it has expired (%v)", err)
	case strings.Contains(msg, "unknown certificate authority"):
		return fmt.Errorf("the gateway refused this client certificate: it is not issued by the gateway's CA (%v)", err)
	case strings.Contains(msg, "bad certificate"), strings.Contains(msg, "certificate revoked"):
		return fmt.Errorf("the gateway refused this client certificate: it is revoked or not valid there (%v)", err)
	case strings.Contains(msg, "protocol version"):
		return fmt.Errorf("the gateway speaks TLS 1.3 only (%v)", err)
	case strings.Contains(msg, "certificate signed by unknown authority"), strings.Contains(msg, "x509:"):
		return fmt.Errorf("the gateway's certificate is not trusted (%v): give the gateway's ca.crt with --ca", err)
	case strings.Contains(msg, "first record does not look like a TLS handshake"):
		return fmt.Errorf("the gateway does not speak TLS at that address (%v)", err)
	}
	return fmt.Errorf("TLS to the gateway failed: %w", err)
}
