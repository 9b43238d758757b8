package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
	"github.com/corral-sandbox/corral/internal/config"
)

// client is a connection to a gateway.
type client struct {
	corralv1.SandboxServiceClient
	conn *grpc.ClientConn
	addr string
}

// address is the gateway address the flags and environment select.
func (g *globals) address() (string, error) {
	if g.gateway != "" {
		if !strings.HasPrefix(g.gateway, "unix://") {
			return "", fmt.Errorf("--gateway %q: want unix:///path/to/corral.sock", g.gateway)
		}
		return g.gateway, nil
	}
	home := g.home
	if home == "" {
		home = config.DefaultHome()
	}
	return "unix://" + config.SocketPath(home), nil
}

func (g *globals) dial() (*client, error) {
	addr, err := g.address()
	if err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("gateway %s: %w", addr, err)
	}
	return &client{SandboxServiceClient: corralv1.NewSandboxServiceClient(conn), conn: conn, addr: addr}, nil
}

func (c *client) Close() error { return c.conn.Close() }

// explain turns a transport failure into advice; API errors pass through.
func (c *client) explain(err error) error {
	if err == nil {
		return nil
	}
	if s, ok := status.FromError(err); ok && s.Code() == codes.Unavailable && !strings.Contains(s.Message(), "shutting down") {
		return fmt.Errorf("cannot reach the gateway at %s: is `corral gateway` running? (%s)", c.addr, s.Message())
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("the gateway at %s did not answer in time", c.addr)
	}
	return err
}
