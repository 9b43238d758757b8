package service

import (
	"bytes"
	"context"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
	"github.com/corral-sandbox/corral/internal/files"
)

// Files is what the file API asks of the core; *sandboxfiles.Files is the
// one implementation.
type Files interface {
	Read(ctx context.Context, nameOrID, path string, w io.Writer) error
	CopyOut(ctx context.Context, nameOrID, path string, w io.Writer) error
	Write(ctx context.Context, nameOrID, path string, mode uint32, r io.Reader) (*files.Info, error)
	CopyIn(ctx context.Context, nameOrID, dir, base string, r io.Reader) (int64, error)
	Stat(ctx context.Context, nameOrID, path string) (*files.Info, error)
	List(ctx context.Context, nameOrID, path string) ([]files.Info, error)
	MkDir(ctx context.Context, nameOrID, path string, parents bool, mode uint32) (*files.Info, error)
	Remove(ctx context.Context, nameOrID, path string, recursive bool) error
	Watch(ctx context.Context, nameOrID, path string, event func(files.Event) error) error
}

// fileService implements corral.v1.FileService on the core's file
// operations, streaming in chunks of at most chunkSize.
type fileService struct {
	corralv1.UnimplementedFileServiceServer
	m Files
}

// NewFiles is the file API served on the core's file operations.
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
	return toGRPC(s.m.CopyOut(stream.Context(), req.GetSandbox(), req.GetPath(), out))
}

func (s *fileService) ReadFile(req *corralv1.ReadFileRequest, stream grpc.ServerStreamingServer[corralv1.FileChunk]) error {
	out := chunker(func(p []byte) error { return stream.Send(&corralv1.FileChunk{Data: p}) })
	return toGRPC(s.m.Read(stream.Context(), req.GetSandbox(), req.GetPath(), out))
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
	written, err := s.m.CopyIn(stream.Context(), h.GetSandbox(), h.GetPath(), h.GetBase(), in)
	if err != nil {
		return toGRPC(err)
	}
	return stream.SendAndClose(&corralv1.CopyInResponse{Written: written})
}

func (s *fileService) WriteFile(stream grpc.ClientStreamingServer[corralv1.WriteFileRequest, corralv1.FileInfo]) error {
	h, in, err := upload(stream.Context(), "WriteFile", stream.Recv, (*corralv1.WriteFileRequest).GetHeader, (*corralv1.WriteFileRequest).GetData)
	if err != nil {
		return err
	}
	info, err := s.m.Write(stream.Context(), h.GetSandbox(), h.GetPath(), h.GetMode(), in)
	if err != nil {
		return toGRPC(err)
	}
	return stream.SendAndClose(infoToProto(info))
}

func (s *fileService) ListDir(ctx context.Context, req *corralv1.ListDirRequest) (*corralv1.ListDirResponse, error) {
	entries, err := s.m.List(ctx, req.GetSandbox(), req.GetPath())
	if err != nil {
		return nil, toGRPC(err)
	}
	out := &corralv1.ListDirResponse{}
	for i := range entries {
		out.Entries = append(out.Entries, infoToProto(&entries[i]))
	}
	return out, nil
}

func (s *fileService) StatFile(ctx context.Context, req *corralv1.StatFileRequest) (*corralv1.FileInfo, error) {
	info, err := s.m.Stat(ctx, req.GetSandbox(), req.GetPath())
	if err != nil {
		return nil, toGRPC(err)
	}
	return infoToProto(info), nil
}

func (s *fileService) RemoveFile(ctx context.Context, req *corralv1.RemoveFileRequest) (*corralv1.RemoveFileResponse, error) {
	if err := s.m.Remove(ctx, req.GetSandbox(), req.GetPath(), req.GetRecursive()); err != nil {
		return nil, toGRPC(err)
	}
	return &corralv1.RemoveFileResponse{}, nil
}

func (s *fileService) MakeDir(ctx context.Context, req *corralv1.MakeDirRequest) (*corralv1.FileInfo, error) {
	info, err := s.m.MkDir(ctx, req.GetSandbox(), req.GetPath(), req.GetParents(), req.GetMode())
	if err != nil {
		return nil, toGRPC(err)
	}
	return infoToProto(info), nil
}

func (s *fileService) WatchDir(req *corralv1.WatchDirRequest, stream grpc.ServerStreamingServer[corralv1.FileEvent]) error {
	return toGRPC(s.m.Watch(stream.Context(), req.GetSandbox(), req.GetPath(), func(ev files.Event) error {
		return stream.Send(&corralv1.FileEvent{Type: ev.Type, Path: ev.Path, Dir: ev.Dir})
	}))
}

func infoToProto(i *files.Info) *corralv1.FileInfo {
	if i == nil {
		return &corralv1.FileInfo{}
	}
	return &corralv1.FileInfo{Name: i.Name, Path: i.Path, Type: i.Type, Size: i.Size, Mode: i.Mode,
		Mtime: ts(i.ModTime), Link: i.Link, Uid: int32(i.UID), Gid: int32(i.GID)}
}
