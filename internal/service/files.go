package service

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
	"github.com/corral-sandbox/corral/internal/files"
)

// Files is what the file API asks of the lifecycle.
type Files interface {
	Files(ctx context.Context, nameOrID string, req files.Request, stdin io.Reader, stdout io.Writer) error
}

// fileService implements corral.v1.FileService on the lifecycle's file
// operations, streaming in chunks of at most chunkSize.
type fileService struct {
	corralv1.UnimplementedFileServiceServer
	m Files
}

// NewFiles is the file API served on a lifecycle.
func NewFiles(m Files) corralv1.FileServiceServer { return &fileService{m: m} }

// chunkSize is the most one message of a stream carries.
const chunkSize = 256 << 10

// chunker sends what is written to it in chunks of at most chunkSize.
type chunker func(p []byte) error

// ReadFrom sends what r holds in whole chunks: io.Copy would read (and
// send) 32 KiB at a time.
func (c chunker) ReadFrom(r io.Reader) (int64, error) {
	buf := make([]byte, chunkSize)
	var total int64
	for {
		n, err := io.ReadFull(r, buf)
		if n > 0 {
			if serr := c(bytes.Clone(buf[:n])); serr != nil {
				return total, serr
			}
			total += int64(n)
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

func (c chunker) Write(p []byte) (int, error) {
	for off := 0; off < len(p); off += chunkSize {
		if err := c(bytes.Clone(p[off:min(len(p), off+chunkSize)])); err != nil {
			return off, err
		}
	}
	return len(p), nil
}

func (s *fileService) CopyOut(req *corralv1.CopyOutRequest, stream grpc.ServerStreamingServer[corralv1.FileChunk]) error {
	out := chunker(func(p []byte) error { return stream.Send(&corralv1.FileChunk{Data: p}) })
	return toGRPC(s.m.Files(stream.Context(), req.GetSandbox(), files.Request{Op: files.OpCopyOut, Path: req.GetPath()}, nil, out))
}

func (s *fileService) ReadFile(req *corralv1.ReadFileRequest, stream grpc.ServerStreamingServer[corralv1.FileChunk]) error {
	out := chunker(func(p []byte) error { return stream.Send(&corralv1.FileChunk{Data: p}) })
	return toGRPC(s.m.Files(stream.Context(), req.GetSandbox(), files.Request{Op: files.OpRead, Path: req.GetPath()}, nil, out))
}

// upload receives a client stream's header, its first message, and
// returns it with a reader of the data of the messages after it, which
// ends when the client closes its side.
func upload[M any, H comparable](ctx context.Context, what string, recv func() (M, error), header func(M) H, data func(M) []byte) (H, io.Reader, error) {
	var none H
	first, err := recv()
	if err != nil {
		return none, nil, err
	}
	h := header(first)
	if h == none {
		return none, nil, status.Errorf(codes.InvalidArgument, "the first %s message must be its header", what)
	}
	r, w := io.Pipe()
	go func() {
		for {
			msg, err := recv()
			if err == nil && header(msg) != none {
				err = status.Errorf(codes.InvalidArgument, "a second %s header", what)
			}
			if err == io.EOF {
				w.Close()
				return
			}
			if err != nil {
				w.CloseWithError(err)
				return
			}
			if _, err := w.Write(data(msg)); err != nil {
				return // the reader gave up
			}
		}
	}()
	context.AfterFunc(ctx, func() { r.CloseWithError(ctx.Err()) })
	return h, r, nil
}

func (s *fileService) CopyIn(stream grpc.ClientStreamingServer[corralv1.CopyInRequest, corralv1.CopyInResponse]) error {
	h, in, err := upload(stream.Context(), "CopyIn", stream.Recv, (*corralv1.CopyInRequest).GetHeader, (*corralv1.CopyInRequest).GetData)
	if err != nil {
		return err
	}
	req := files.Request{Op: files.OpCopyIn, Path: h.GetPath(), Base: h.GetBase()}
	res, err := s.result(stream.Context(), h.GetSandbox(), req, in)
	if err != nil {
		return err
	}
	return stream.SendAndClose(&corralv1.CopyInResponse{Written: res.Written})
}

func (s *fileService) WriteFile(stream grpc.ClientStreamingServer[corralv1.WriteFileRequest, corralv1.FileInfo]) error {
	h, in, err := upload(stream.Context(), "WriteFile", stream.Recv, (*corralv1.WriteFileRequest).GetHeader, (*corralv1.WriteFileRequest).GetData)
	if err != nil {
		return err
	}
	res, err := s.result(stream.Context(), h.GetSandbox(), files.Request{Op: files.OpWrite, Path: h.GetPath(), Mode: h.GetMode()}, in)
	if err != nil {
		return err
	}
	return stream.SendAndClose(infoToProto(res.Info))
}

// result runs an operation whose output is a files.Result.
func (s *fileService) result(ctx context.Context, name string, req files.Request, in io.Reader) (files.Result, error) {
	var out bytes.Buffer
	if err := s.m.Files(ctx, name, req, in, &out); err != nil {
		return files.Result{}, toGRPC(err)
	}
	res, err := files.ReadResult(&out)
	return res, toGRPC(err)
}

func (s *fileService) ListDir(ctx context.Context, req *corralv1.ListDirRequest) (*corralv1.ListDirResponse, error) {
	res, err := s.result(ctx, req.GetSandbox(), files.Request{Op: files.OpList, Path: req.GetPath()}, nil)
	if err != nil {
		return nil, err
	}
	out := &corralv1.ListDirResponse{}
	for i := range res.Entries {
		out.Entries = append(out.Entries, infoToProto(&res.Entries[i]))
	}
	return out, nil
}

func (s *fileService) StatFile(ctx context.Context, req *corralv1.StatFileRequest) (*corralv1.FileInfo, error) {
	res, err := s.result(ctx, req.GetSandbox(), files.Request{Op: files.OpStat, Path: req.GetPath()}, nil)
	if err != nil {
		return nil, err
	}
	return infoToProto(res.Info), nil
}

func (s *fileService) RemoveFile(ctx context.Context, req *corralv1.RemoveFileRequest) (*corralv1.RemoveFileResponse, error) {
	err := s.m.Files(ctx, req.GetSandbox(), files.Request{Op: files.OpRemove, Path: req.GetPath(), Recursive: req.GetRecursive()}, nil, io.Discard)
	if err != nil {
		return nil, toGRPC(err)
	}
	return &corralv1.RemoveFileResponse{}, nil
}

func (s *fileService) MakeDir(ctx context.Context, req *corralv1.MakeDirRequest) (*corralv1.FileInfo, error) {
	res, err := s.result(ctx, req.GetSandbox(), files.Request{Op: files.OpMkdir, Path: req.GetPath(), Parents: req.GetParents(), Mode: req.GetMode()}, nil)
	if err != nil {
		return nil, err
	}
	return infoToProto(res.Info), nil
}

func (s *fileService) WatchDir(req *corralv1.WatchDirRequest, stream grpc.ServerStreamingServer[corralv1.FileEvent]) error {
	lines := &lineWriter{line: func(line []byte) error {
		var ev files.Event
		if err := json.Unmarshal(line, &ev); err != nil {
			return errors.New("the watch sent a line that is not an event")
		}
		return stream.Send(&corralv1.FileEvent{Type: ev.Type, Path: ev.Path, Dir: ev.Dir})
	}}
	err := s.m.Files(stream.Context(), req.GetSandbox(), files.Request{Op: files.OpWatch, Path: req.GetPath()}, nil, lines)
	if err == nil && lines.err != nil {
		err = lines.err
	}
	return toGRPC(err)
}

// lineWriter calls line with each non-empty line written to it (empty
// ones are a watch's heartbeats); a line longer than maxLine is an error.
type lineWriter struct {
	buf  []byte
	line func([]byte) error
	err  error
}

const maxLine = 64 << 10

func (l *lineWriter) Write(p []byte) (int, error) {
	if l.err != nil {
		return 0, l.err
	}
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			break
		}
		line := l.buf[:i]
		l.buf = l.buf[i+1:]
		if len(line) == 0 {
			continue
		}
		if err := l.line(line); err != nil {
			l.err = err
			return 0, err
		}
	}
	if len(l.buf) > maxLine {
		l.err = errors.New("the watch sent a line of more than 64 KiB")
		return 0, l.err
	}
	l.buf = append([]byte(nil), l.buf...)
	return len(p), nil
}

func infoToProto(i *files.Info) *corralv1.FileInfo {
	if i == nil {
		return &corralv1.FileInfo{}
	}
	return &corralv1.FileInfo{Name: i.Name, Path: i.Path, Type: i.Type, Size: i.Size, Mode: i.Mode,
		Mtime: ts(i.ModTime), Link: i.Link, Uid: int32(i.UID), Gid: int32(i.GID)}
}
