package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/corral-sandbox/corral/internal/mcptools"
)

// cleanupTimeout bounds the deletes of a stdio session's sandboxes at its
// end.
const cleanupTimeout = 2 * time.Minute

func newMCPCmd(g *globals) *cobra.Command {
	var (
		maxSandboxes int
		keep         bool
	)
	cmd := &cobra.Command{
		Use:   "mcp [--max-sandboxes N] [--keep]",
		Short: "Serve corral's tools to an agent over the Model Context Protocol (stdio)",
		Long: `Serve corral's tools (sandbox_create, sandbox_exec, fs_read, fs_write, ...) over the Model
Context Protocol on stdin and stdout, for agents that start tools as subprocesses. It is a
client of a gateway as the other commands are (--home, --context, CORRAL_HOME). The
sandboxes the session creates carry the label mcp.session; it holds at most
--max-sandboxes of them, and deletes them when it ends unless --keep.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.dial()
			if err != nil {
				return err
			}
			defer c.Close()
			var id [6]byte
			_, _ = rand.Read(id[:])
			session := "stdio-" + hex.EncodeToString(id[:])
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			server := mcptools.NewServer(c, mcptools.Options{Session: session, MaxSandboxes: maxSandboxes})
			runErr := server.Run(ctx, &mcp.StdioTransport{})
			if keep {
				return ignoreEnd(ctx, runErr)
			}
			cctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
			defer cancel()
			n, err := mcptools.DeleteCreated(cctx, c, session)
			if n > 0 {
				fmt.Fprintf(g.stderr, "corral mcp: deleted the %d sandbox(es) of this session\n", n)
			}
			if err != nil {
				return fmt.Errorf("deleting this session's sandboxes: %w", err)
			}
			return ignoreEnd(ctx, runErr)
		},
	}
	cmd.Flags().IntVar(&maxSandboxes, "max-sandboxes", mcptools.DefaultMaxSandboxes, "the most sandboxes this session may hold at once")
	cmd.Flags().BoolVar(&keep, "keep", false, "keep the session's sandboxes when it ends")
	return cmd
}

// ignoreEnd is the error of a session that ended, but for the ends that
// are no failure: the client closed stdin, or a signal.
func ignoreEnd(ctx context.Context, err error) error {
	if ctx.Err() != nil || err == nil || err == context.Canceled || isEOF(err) {
		return nil
	}
	return err
}

func isEOF(err error) bool { return errors.Is(err, io.EOF) || errors.Is(err, mcp.ErrConnectionClosed) }
