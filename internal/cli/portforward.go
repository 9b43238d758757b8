package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/spf13/cobra"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
	corral "github.com/corral-sandbox/corral/client"
)

func newPortForwardCmd(g *globals) *cobra.Command {
	var forwards []forward
	return &cobra.Command{
		Use:   "port-forward NAME [LOCAL:]REMOTE...",
		Short: "Forward local ports to ports on a running sandbox's loopback, through the gateway, until Ctrl-C",
		Long: "Listens on 127.0.0.1:LOCAL on this machine (LOCAL omitted or 0: a free port) and carries every\n" +
			"connection through the gateway's API connection, local or remote, to 127.0.0.1:REMOTE inside the\n" +
			"sandbox, whatever its network policy says.",
		Args: func(_ *cobra.Command, args []string) (err error) {
			if len(args) < 2 {
				return errors.New("usage: corral sandbox port-forward NAME [LOCAL:]REMOTE...")
			}
			forwards, err = parseForwards(args[1:])
			return err
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.dial()
			if err != nil {
				return err
			}
			defer c.Close()
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			sb, err := c.GetSandbox(ctx, &corralv1.GetSandboxRequest{Name: args[0]})
			if err != nil {
				return c.Explain(err)
			}
			if sb.Phase != "ready" {
				return fmt.Errorf("sandbox %q is %s, not ready: port-forward needs a running sandbox", sb.Name, sb.Phase)
			}
			pf := &portForwarder{g: g, c: c, name: args[0]}
			for _, f := range forwards {
				l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(f.local)))
				if err != nil {
					return fmt.Errorf("port-forward: %w", err)
				}
				defer l.Close()
				fmt.Fprintf(g.stdout, "Forwarding from %s -> %d\n", l.Addr(), f.remote)
				pf.wg.Add(1)
				go pf.accept(ctx, l, f.remote)
			}
			<-ctx.Done()
			pf.wg.Wait()
			return nil
		},
	}
}

// forward is one [LOCAL:]REMOTE argument.
type forward struct{ local, remote int }

func parseForwards(args []string) ([]forward, error) {
	var out []forward
	for _, arg := range args {
		local, remote, found := strings.Cut(arg, ":")
		if !found {
			local, remote = "0", arg
		}
		if local == "" {
			local = "0"
		}
		l, lerr := strconv.Atoi(local)
		r, rerr := strconv.Atoi(remote)
		if lerr != nil || rerr != nil || l < 0 || l > 65535 || r < 1 || r > 65535 {
			return nil, fmt.Errorf("port %q: want [LOCAL:]REMOTE, ports from 1 to 65535 (LOCAL 0 or omitted: a free one)", arg)
		}
		out = append(out, forward{l, r})
	}
	return out, nil
}

// portForwarder carries the connections of one port-forward command.
type portForwarder struct {
	g    *globals
	c    *corral.Client
	name string
	mu   sync.Mutex // one line printed at a time
	wg   sync.WaitGroup
}

func (pf *portForwarder) printf(w io.Writer, format string, args ...any) {
	pf.mu.Lock()
	defer pf.mu.Unlock()
	fmt.Fprintf(w, format, args...)
}

// accept forwards each connection to l until ctx ends, which closes l.
func (pf *portForwarder) accept(ctx context.Context, l net.Listener, remote int) {
	defer pf.wg.Done() // counted by the caller; each connection by this loop
	go func() { <-ctx.Done(); l.Close() }()
	for {
		conn, err := l.Accept()
		if err != nil {
			return
		}
		pf.wg.Add(1)
		go func() {
			defer pf.wg.Done()
			defer conn.Close()
			pf.printf(pf.g.stdout, "Handling connection for %d\n", remote)
			if err := pf.c.Forward(ctx, pf.name, remote, conn.(*net.TCPConn)); err != nil && ctx.Err() == nil {
				_ = conn.(*net.TCPConn).SetLinger(0) // the local client sees a reset
				pf.printf(pf.g.stderr, "corral: error forwarding port %d: %s\n", remote, corral.Message(err))
			}
		}()
	}
}
