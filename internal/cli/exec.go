package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	corral "github.com/corral-sandbox/corral/client"
)

func newExecCmd(g *globals) *cobra.Command {
	var interactive, tty bool
	cmd := &cobra.Command{
		Use:   "exec NAME [-i] [-t] -- CMD [ARGS...]",
		Short: "Run a command in a ready sandbox; its exit code becomes corral's",
		Args:  cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if dash := cmd.ArgsLenAtDash(); dash != 1 {
				return fmt.Errorf("usage: corral sandbox exec NAME -- CMD [ARGS...]")
			}
			c, err := g.dial()
			if err != nil {
				return err
			}
			defer c.Close()
			opts := corral.ExecOptions{Stdout: g.stdout, Stderr: g.stderr, TTY: tty}
			if interactive {
				opts.Stdin = os.Stdin
			}
			fd := int(os.Stdin.Fd())
			if tty {
				if !term.IsTerminal(fd) {
					return errors.New("-t needs a terminal on stdin")
				}
				if cols, rows, err := term.GetSize(fd); err == nil {
					opts.Size = corral.TerminalSize{Rows: uint32(rows), Cols: uint32(cols)}
				}
				state, err := term.MakeRaw(fd)
				if err != nil {
					return err
				}
				defer term.Restore(fd, state)
				opts.Resize = resizes(cmd.Context(), fd)
			}
			code, err := c.Exec(cmd.Context(), args[0], args[1:], opts)
			if err != nil {
				return err
			}
			if code != 0 {
				return &exitError{code: code}
			}
			return nil
		},
	}
	cmd.Flags().BoolVarP(&interactive, "interactive", "i", false, "send stdin to the command")
	cmd.Flags().BoolVarP(&tty, "tty", "t", false, "give the command a terminal")
	return cmd
}

// resizes sends the terminal's size at each SIGWINCH until ctx ends.
func resizes(ctx context.Context, fd int) <-chan corral.TerminalSize {
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	out := make(chan corral.TerminalSize, 1)
	go func() {
		defer signal.Stop(winch)
		for {
			select {
			case <-ctx.Done():
				return
			case <-winch:
				if cols, rows, err := term.GetSize(fd); err == nil {
					select {
					case out <- corral.TerminalSize{Rows: uint32(rows), Cols: uint32(cols)}:
					default: // the last one not sent yet is as good
					}
				}
			}
		}
	}()
	return out
}

func newLogsCmd(g *globals) *cobra.Command {
	var (
		follow bool
		tail   int32
	)
	cmd := &cobra.Command{
		Use:   "logs NAME [-f] [--tail N]",
		Short: "Print what a sandbox's main process printed",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.dial()
			if err != nil {
				return err
			}
			defer c.Close()
			return c.Logs(cmd.Context(), args[0], corral.LogOptions{Follow: follow, Tail: int(tail)}, g.stdout, g.stderr)
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new output")
	cmd.Flags().Int32Var(&tail, "tail", 0, "start with the last N lines (0: all)")
	return cmd
}
