package client

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sync"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
)

// TerminalSize is a terminal's rows and columns.
type TerminalSize struct{ Rows, Cols uint32 }

// ExecOptions are a command's input and output.
type ExecOptions struct {
	// Stdin, when set, is sent to the command; its end closes the
	// command's standard input.
	Stdin io.Reader
	// Stdout and Stderr receive the command's output as it comes (nil:
	// discarded). With TTY, everything comes on Stdout.
	Stdout, Stderr io.Writer
	// TTY gives the command a terminal of Size; each size sent on Resize
	// resizes it.
	TTY    bool
	Size   TerminalSize
	Resize <-chan TerminalSize
}

// Exec runs command in a ready sandbox and returns its exit code (127: no
// such program). An error is the gateway's (the sandbox is not ready, the
// command was refused) or the connection's, never the command's own
// failure.
func (c *Client) Exec(ctx context.Context, name string, command []string, opts ExecOptions) (int, error) {
	ctx, cancel := context.WithCancel(ctx) // ends the input's goroutines with the call
	defer cancel()
	stream, err := c.ExecSandbox(ctx)
	if err != nil {
		return 0, c.Explain(err)
	}
	start := &corralv1.ExecStart{Name: name, Command: command, Tty: opts.TTY, Stdin: opts.Stdin != nil}
	if opts.Size != (TerminalSize{}) {
		start.Size = &corralv1.TerminalSize{Rows: opts.Size.Rows, Cols: opts.Size.Cols}
	}
	var sendMu sync.Mutex // input and resizes share the stream
	send := func(req *corralv1.ExecRequest) error {
		sendMu.Lock()
		defer sendMu.Unlock()
		return stream.Send(req)
	}
	if err := send(&corralv1.ExecRequest{Msg: &corralv1.ExecRequest_Start{Start: start}}); err != nil {
		_, err = stream.Recv() // the call's own error
		return 0, c.Explain(err)
	}
	if opts.Stdin != nil {
		go sendInput(opts.Stdin, send)
	}
	if opts.Resize != nil {
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case size, ok := <-opts.Resize:
					if !ok {
						return
					}
					_ = send(&corralv1.ExecRequest{Msg: &corralv1.ExecRequest_Resize{Resize: &corralv1.TerminalSize{Rows: size.Rows, Cols: size.Cols}}})
				}
			}
		}()
	}
	stdout, stderr := orDiscard(opts.Stdout), orDiscard(opts.Stderr)
	for {
		resp, err := stream.Recv()
		if err == io.EOF {
			return 0, errors.New("the gateway ended the exec without an exit code")
		}
		if err != nil {
			return 0, c.Explain(err)
		}
		switch msg := resp.Msg.(type) {
		case *corralv1.ExecResponse_Stdout:
			if _, err := stdout.Write(msg.Stdout); err != nil {
				return 0, err
			}
		case *corralv1.ExecResponse_Stderr:
			if _, err := stderr.Write(msg.Stderr); err != nil {
				return 0, err
			}
		case *corralv1.ExecResponse_ExitCode:
			return int(msg.ExitCode), nil
		}
	}
}

// sendInput sends r's bytes as the command's input, then its end.
func sendInput(r io.Reader, send func(*corralv1.ExecRequest) error) {
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if send(&corralv1.ExecRequest{Msg: &corralv1.ExecRequest_Stdin{Stdin: bytes.Clone(buf[:n])}}) != nil {
				return
			}
		}
		if err != nil {
			_ = send(&corralv1.ExecRequest{Msg: &corralv1.ExecRequest_CloseStdin{CloseStdin: true}})
			return
		}
	}
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

// Output is what a command run with Run printed, and how it ended.
type Output struct {
	Stdout, Stderr []byte
	ExitCode       int
}

// Run runs command in a ready sandbox with no input and returns its
// output whole (see Exec).
func (c *Client) Run(ctx context.Context, name string, command ...string) (*Output, error) {
	var stdout, stderr bytes.Buffer
	code, err := c.Exec(ctx, name, command, ExecOptions{Stdout: &stdout, Stderr: &stderr})
	if err != nil {
		return nil, err
	}
	return &Output{Stdout: stdout.Bytes(), Stderr: stderr.Bytes(), ExitCode: code}, nil
}

// LogOptions choose what Logs prints.
type LogOptions struct {
	// Follow keeps printing new output until ctx ends.
	Follow bool
	// Tail starts with the last Tail lines (0: all).
	Tail int
}

// Logs writes what a sandbox's main process printed to stdout and stderr.
func (c *Client) Logs(ctx context.Context, name string, opts LogOptions, stdout, stderr io.Writer) error {
	stream, err := c.SandboxLogs(ctx, &corralv1.SandboxLogsRequest{Name: name, Follow: opts.Follow, Tail: int32(opts.Tail)})
	if err != nil {
		return c.Explain(err)
	}
	stdout, stderr = orDiscard(stdout), orDiscard(stderr)
	for {
		chunk, err := stream.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return c.Explain(err)
		}
		if _, err := stdout.Write(chunk.Stdout); err != nil {
			return err
		}
		if _, err := stderr.Write(chunk.Stderr); err != nil {
			return err
		}
	}
}
