package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
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
			stream, err := c.ExecSandbox(cmd.Context())
			if err != nil {
				return c.explain(err)
			}
			start := &corralv1.ExecStart{Name: args[0], Command: args[1:], Tty: tty, Stdin: interactive}
			fd := int(os.Stdin.Fd())
			if tty {
				if !term.IsTerminal(fd) {
					return errors.New("-t needs a terminal on stdin")
				}
				if cols, rows, err := term.GetSize(fd); err == nil {
					start.Size = &corralv1.TerminalSize{Rows: uint32(rows), Cols: uint32(cols)}
				}
				state, err := term.MakeRaw(fd)
				if err != nil {
					return err
				}
				defer term.Restore(fd, state)
				go forwardResizes(fd, stream)
			}
			if err := stream.Send(&corralv1.ExecRequest{Msg: &corralv1.ExecRequest_Start{Start: start}}); err != nil {
				return c.explain(err)
			}
			if interactive {
				go sendStdin(stream)
			}
			for {
				resp, err := stream.Recv()
				if err == io.EOF {
					return errors.New("the gateway ended the exec without an exit code")
				}
				if err != nil {
					return c.explain(err)
				}
				switch msg := resp.Msg.(type) {
				case *corralv1.ExecResponse_Stdout:
					g.stdout.Write(msg.Stdout)
				case *corralv1.ExecResponse_Stderr:
					g.stderr.Write(msg.Stderr)
				case *corralv1.ExecResponse_ExitCode:
					if msg.ExitCode != 0 {
						return &exitError{code: int(msg.ExitCode)}
					}
					return nil
				}
			}
		},
	}
	cmd.Flags().BoolVarP(&interactive, "interactive", "i", false, "send stdin to the command")
	cmd.Flags().BoolVarP(&tty, "tty", "t", false, "give the command a terminal")
	return cmd
}

func sendStdin(stream corralv1.SandboxService_ExecSandboxClient) {
	buf := make([]byte, 32*1024)
	for {
		n, err := os.Stdin.Read(buf)
		if n > 0 {
			if stream.Send(&corralv1.ExecRequest{Msg: &corralv1.ExecRequest_Stdin{Stdin: append([]byte(nil), buf[:n]...)}}) != nil {
				return
			}
		}
		if err != nil {
			_ = stream.Send(&corralv1.ExecRequest{Msg: &corralv1.ExecRequest_CloseStdin{CloseStdin: true}})
			return
		}
	}
}

func forwardResizes(fd int, stream corralv1.SandboxService_ExecSandboxClient) {
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	for range winch {
		if cols, rows, err := term.GetSize(fd); err == nil {
			_ = stream.Send(&corralv1.ExecRequest{Msg: &corralv1.ExecRequest_Resize{Resize: &corralv1.TerminalSize{Rows: uint32(rows), Cols: uint32(cols)}}})
		}
	}
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
			stream, err := c.SandboxLogs(cmd.Context(), &corralv1.SandboxLogsRequest{Name: args[0], Follow: follow, Tail: tail})
			if err != nil {
				return c.explain(err)
			}
			for {
				chunk, err := stream.Recv()
				if err == io.EOF {
					return nil
				}
				if err != nil {
					return c.explain(err)
				}
				g.stdout.Write(chunk.Stdout)
				g.stderr.Write(chunk.Stderr)
			}
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new output")
	cmd.Flags().Int32Var(&tail, "tail", 0, "start with the last N lines (0: all)")
	return cmd
}
