package service

import (
	"errors"
	"io"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
	"github.com/corral-sandbox/corral/internal/driver"
)

// streamWriter sends what is written to it as responses of a stream;
// several writers share one lock, since a stream's Send is not concurrent.
type streamWriter struct {
	mu   *sync.Mutex
	send func(p []byte) error
}

func (w streamWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.send(append([]byte(nil), p...)); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (s *service) ExecSandbox(stream corralv1.SandboxService_ExecSandboxServer) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	start := first.GetStart()
	if start == nil {
		return status.Error(codes.InvalidArgument, "the first exec message must be an ExecStart")
	}
	var mu sync.Mutex
	out := streamWriter{&mu, func(p []byte) error {
		return stream.Send(&corralv1.ExecResponse{Msg: &corralv1.ExecResponse_Stdout{Stdout: p}})
	}}
	errOut := streamWriter{&mu, func(p []byte) error {
		return stream.Send(&corralv1.ExecResponse{Msg: &corralv1.ExecResponse_Stderr{Stderr: p}})
	}}
	resize := make(chan driver.TerminalSize, 4)
	opts := driver.ExecOptions{
		Command: start.Command, TTY: start.Tty, Stdout: out, Stderr: errOut, Resize: resize,
		Size: driver.TerminalSize{Rows: uint(start.GetSize().GetRows()), Cols: uint(start.GetSize().GetCols())},
	}
	var stdinW *io.PipeWriter
	if start.Stdin {
		var stdinR *io.PipeReader
		stdinR, stdinW = io.Pipe()
		opts.Stdin = stdinR
	}
	go func() { // input from the caller
		defer close(resize)
		for {
			req, err := stream.Recv()
			if err != nil {
				if stdinW != nil {
					stdinW.CloseWithError(err)
				}
				return
			}
			switch msg := req.Msg.(type) {
			case *corralv1.ExecRequest_Stdin:
				if stdinW != nil {
					if _, err := stdinW.Write(msg.Stdin); err != nil {
						return
					}
				}
			case *corralv1.ExecRequest_CloseStdin:
				if stdinW != nil {
					stdinW.Close()
				}
			case *corralv1.ExecRequest_Resize:
				select {
				case resize <- driver.TerminalSize{Rows: uint(msg.Resize.Rows), Cols: uint(msg.Resize.Cols)}:
				default:
				}
			}
		}
	}()
	code, err := s.m.Exec(stream.Context(), start.Name, opts)
	if err != nil {
		return toGRPC(err)
	}
	mu.Lock()
	defer mu.Unlock()
	return stream.Send(&corralv1.ExecResponse{Msg: &corralv1.ExecResponse_ExitCode{ExitCode: int32(code)}})
}

func (s *service) SandboxLogs(req *corralv1.SandboxLogsRequest, stream corralv1.SandboxService_SandboxLogsServer) error {
	var mu sync.Mutex
	out := streamWriter{&mu, func(p []byte) error { return stream.Send(&corralv1.LogChunk{Stdout: p}) }}
	errOut := streamWriter{&mu, func(p []byte) error { return stream.Send(&corralv1.LogChunk{Stderr: p}) }}
	err := s.m.Logs(stream.Context(), req.Name, driver.LogOptions{Follow: req.Follow, Tail: int(req.Tail)}, out, errOut)
	if errors.Is(err, io.EOF) {
		return nil
	}
	return toGRPC(err)
}
