package cli

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
	"github.com/corral-sandbox/corral/internal/config"
	"github.com/corral-sandbox/corral/internal/tlsauth"
)

// client is a connection to a gateway.
type client struct {
	corralv1.SandboxServiceClient
	files corralv1.FileServiceClient
	conn  *grpc.ClientConn
	addr  string
	tls   *tls.Config // nil on a Unix socket
	host  string      // HOST:PORT over TCP
}

// homeDir is --home, else the default home (CORRAL_HOME, ...).
func (g *globals) homeDir() string {
	if g.home != "" {
		return g.home
	}
	return config.DefaultHome()
}

// target is where the flags, the environment and the contexts say the
// gateway is: --gateway, then --context, then an explicit --home or
// CORRAL_HOME, then the current context, then the default home's socket.
func (g *globals) target() (*contextEntry, error) {
	if g.gateway != "" {
		if !strings.HasPrefix(g.gateway, "unix://") {
			return nil, fmt.Errorf("--gateway %q: want unix:///path/to/corral.sock (for https, add a context)", g.gateway)
		}
		return &contextEntry{Gateway: g.gateway}, nil
	}
	local := func() *contextEntry {
		return &contextEntry{Gateway: "unix://" + config.SocketPath(g.homeDir())}
	}
	if g.context == "" && (g.home != "" || os.Getenv("CORRAL_HOME") != "") {
		return local(), nil
	}
	cfg, err := loadClientConfig()
	if err != nil {
		return nil, err
	}
	name := g.context
	if name == "" {
		name = cfg.CurrentContext
	}
	if name == "" {
		return local(), nil
	}
	e := cfg.Contexts[name]
	if e == nil {
		return nil, fmt.Errorf("context %q not found (see corral context list)", name)
	}
	return e, nil
}

func (g *globals) dial() (*client, error) {
	e, err := g.target()
	if err != nil {
		return nil, err
	}
	c := &client{addr: e.Gateway}
	var creds credentials.TransportCredentials = insecure.NewCredentials()
	target := e.Gateway
	if strings.HasPrefix(e.Gateway, "https://") {
		u, err := url.Parse(e.Gateway)
		if err != nil {
			return nil, fmt.Errorf("gateway %q: %w", e.Gateway, err)
		}
		if c.tls, err = tlsauth.ClientConfig(e.CA, e.Cert, e.Key); err != nil {
			return nil, err
		}
		c.tls.ServerName = u.Hostname()
		c.host, target = u.Host, u.Host
		creds = credentials.NewTLS(c.tls)
	}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(creds),
		// windows and buffers for file copies, as the gateway's (service.StreamOptions)
		grpc.WithInitialWindowSize(4<<20), grpc.WithInitialConnWindowSize(4<<20),
		grpc.WithReadBufferSize(256<<10), grpc.WithWriteBufferSize(256<<10))
	if err != nil {
		return nil, fmt.Errorf("gateway %s: %w", e.Gateway, err)
	}
	c.conn, c.SandboxServiceClient = conn, corralv1.NewSandboxServiceClient(conn)
	c.files = corralv1.NewFileServiceClient(conn)
	return c, nil
}

func (c *client) Close() error { return c.conn.Close() }

// explain turns a transport failure into advice; API errors pass through,
// including an Unavailable that the gateway itself answered with (a registry
// or an engine it could not reach), which the connection's state tells apart.
func (c *client) explain(err error) error {
	if err == nil {
		return nil
	}
	if s, ok := status.FromError(err); ok && s.Code() == codes.Unavailable && !strings.Contains(s.Message(), "shutting down") &&
		c.conn.GetState() != connectivity.Ready {
		if c.tls != nil {
			if why := tlsauth.Diagnose(c.host, c.tls); why != nil {
				return fmt.Errorf("gateway %s: %v", c.addr, why)
			}
		}
		return fmt.Errorf("cannot reach the gateway at %s: is `corral gateway` running? (%s)", c.addr, s.Message())
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("the gateway at %s did not answer in time", c.addr)
	}
	return err
}
