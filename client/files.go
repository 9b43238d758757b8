package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
	"github.com/corral-sandbox/corral/internal/files"
)

// FileInfo describes a file in a sandbox.
type FileInfo = corralv1.FileInfo

// chunkSize is the data of one message of a file stream.
const chunkSize = 256 << 10

// ReadFile returns a file of a sandbox whole; ReadFileTo streams one.
func (c *Client) ReadFile(ctx context.Context, name, path string) ([]byte, error) {
	var b bytes.Buffer
	if err := c.ReadFileTo(ctx, name, path, &b); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// ReadFileTo writes a file of a sandbox to w as it comes.
func (c *Client) ReadFileTo(ctx context.Context, name, path string, w io.Writer) error {
	return c.download(ctx, w, func(ctx context.Context) (grpc.ServerStreamingClient[corralv1.FileChunk], error) {
		return c.Files.ReadFile(ctx, &corralv1.ReadFileRequest{Sandbox: name, Path: path})
	})
}

// download writes the chunks of the stream call opens to w.
func (c *Client) download(ctx context.Context, w io.Writer, call func(context.Context) (grpc.ServerStreamingClient[corralv1.FileChunk], error)) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := call(ctx)
	if err != nil {
		return c.Explain(err)
	}
	return c.Explain(receive(stream.Recv, w))
}

// receive writes the data of a stream's chunks to w until it ends.
func receive(recv func() (*corralv1.FileChunk, error), w io.Writer) error {
	for {
		msg, err := recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if _, err := w.Write(msg.GetData()); err != nil {
			return err
		}
	}
}

// WriteFile writes r's bytes as a sandbox's file path (made or replaced
// whole, atomically), with mode's permission bits (0: 0644).
func (c *Client) WriteFile(ctx context.Context, name, path string, r io.Reader, mode fs.FileMode) (*FileInfo, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.Files.WriteFile(ctx)
	if err != nil {
		return nil, c.Explain(err)
	}
	header := &corralv1.WriteFileRequest{Msg: &corralv1.WriteFileRequest_Header{Header: &corralv1.WriteFileHeader{Sandbox: name, Path: path, Mode: uint32(mode.Perm())}}}
	err = send(r, func() error { return stream.Send(header) }, func(p []byte) error {
		return stream.Send(&corralv1.WriteFileRequest{Msg: &corralv1.WriteFileRequest_Data{Data: p}})
	})
	if err != nil {
		return nil, err // the call is cancelled: nothing is written
	}
	info, err := stream.CloseAndRecv() // the gateway's own reason, when a send failed
	return info, c.Explain(err)
}

// send sends a header, then r's bytes in chunks, and returns r's error
// (the caller then cancels the call). A failed send is the stream's: its
// reason comes with the call's close.
func send(r io.Reader, header func() error, data func([]byte) error) error {
	if err := header(); err != nil {
		return nil
	}
	buf := make([]byte, chunkSize)
	for {
		n, err := io.ReadFull(r, buf)
		if n > 0 {
			if serr := data(bytes.Clone(buf[:n])); serr != nil {
				return nil
			}
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// Stat describes a sandbox's file; a missing one is NotFound.
func (c *Client) Stat(ctx context.Context, name, path string) (*FileInfo, error) {
	info, err := c.Files.StatFile(ctx, &corralv1.StatFileRequest{Sandbox: name, Path: path})
	return info, c.Explain(err)
}

// ListDir lists a sandbox's directory.
func (c *Client) ListDir(ctx context.Context, name, path string) ([]*FileInfo, error) {
	resp, err := c.Files.ListDir(ctx, &corralv1.ListDirRequest{Sandbox: name, Path: path})
	if err != nil {
		return nil, c.Explain(err)
	}
	return resp.Entries, nil
}

// Remove removes a sandbox's file, or a directory: an empty one, or with
// recursive a whole tree.
func (c *Client) Remove(ctx context.Context, name, path string, recursive bool) error {
	_, err := c.Files.RemoveFile(ctx, &corralv1.RemoveFileRequest{Sandbox: name, Path: path, Recursive: recursive})
	return c.Explain(err)
}

// MkDir makes a sandbox's directory, and with parents the missing ones
// above it (as mkdir -p: one already there is no error then).
func (c *Client) MkDir(ctx context.Context, name, path string, parents bool) (*FileInfo, error) {
	info, err := c.Files.MakeDir(ctx, &corralv1.MakeDirRequest{Sandbox: name, Path: path, Parents: parents})
	return info, c.Explain(err)
}

// CopyOut writes a tar stream of a sandbox's path (a file, or a directory
// tree under its own name; DIR/. for what DIR holds) to w.
func (c *Client) CopyOut(ctx context.Context, name, path string, w io.Writer) error {
	return c.download(ctx, w, func(ctx context.Context) (grpc.ServerStreamingClient[corralv1.FileChunk], error) {
		return c.Files.CopyOut(ctx, &corralv1.CopyOutRequest{Sandbox: name, Path: path})
	})
}

// CopyIn unpacks a tar stream into a sandbox's directory dir, its top
// entry renamed base when base is set, and returns the bytes written.
func (c *Client) CopyIn(ctx context.Context, name, dir, base string, tar io.Reader) (int64, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.Files.CopyIn(ctx)
	if err != nil {
		return 0, c.Explain(err)
	}
	header := &corralv1.CopyInRequest{Msg: &corralv1.CopyInRequest_Header{Header: &corralv1.CopyInHeader{Sandbox: name, Path: dir, Base: base}}}
	err = send(tar, func() error { return stream.Send(header) }, func(p []byte) error {
		return stream.Send(&corralv1.CopyInRequest{Msg: &corralv1.CopyInRequest_Data{Data: p}})
	})
	if err != nil {
		return 0, err // the call is cancelled
	}
	resp, err := stream.CloseAndRecv()
	return resp.GetWritten(), c.Explain(err)
}

// CopyOptions tune CopyFrom and CopyTo.
type CopyOptions struct {
	// Progress, when set, is called as the copy goes with the bytes
	// copied so far and, when known, the total (0: not known).
	Progress func(copied, total int64)
}

// CopyFrom copies a sandbox's path to the local dst as docker cp does:
// into dst when it is a directory, else as dst; path DIR/. copies what DIR
// holds. The stream comes from the sandbox and is unpacked as hostile:
// nothing lands outside dst.
func (c *Client) CopyFrom(ctx context.Context, name, src, dst string, opts CopyOptions) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var total int64
	st, err := c.Stat(ctx, name, src)
	if err != nil {
		return err
	}
	if st.Type == "file" {
		total = st.Size
	}
	r, w := io.Pipe()
	go func() { w.CloseWithError(c.CopyOut(ctx, name, src, w)) }()
	defer r.Close()
	err = unpackLocal(counting(r, total, opts.Progress), dst, remoteBase(src))
	if err != nil {
		r.CloseWithError(err)
	}
	return err
}

// CopyTo copies the local src (a file or a tree; DIR/. for what DIR holds)
// into a sandbox's path as docker cp does: into dst when it is a
// directory, else as dst.
func (c *Client) CopyTo(ctx context.Context, src, name, dst string, opts CopyOptions) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	abs, err := filepath.Abs(src)
	if err != nil {
		return err
	}
	fi, err := os.Lstat(abs)
	if err != nil {
		return err
	}
	dir, rel, top := filepath.Dir(abs), filepath.Base(abs), filepath.Base(abs)
	if strings.HasSuffix(src, "/.") || abs == "/" {
		if !fi.IsDir() {
			return fmt.Errorf("%s: not a directory", src)
		}
		dir, rel, top = abs, ".", ""
		if err := c.ensureDir(ctx, name, dst); err != nil {
			return err
		}
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	r, w := io.Pipe()
	go func() { w.CloseWithError(files.Pack(w, root, rel, top)) }()
	defer r.Close()
	_, err = c.CopyIn(ctx, name, dst, top, counting(r, treeSize(abs), opts.Progress))
	return err
}

// ensureDir makes a sandbox's directory unless it is there.
func (c *Client) ensureDir(ctx context.Context, name, dir string) error {
	_, err := c.Stat(ctx, name, dir)
	if status.Code(err) == codes.NotFound {
		_, err = c.MkDir(ctx, name, dir, false)
	}
	return err
}

// remoteBase is the name of a remote path's top entry in a copy's tar
// stream; "" when the path asks for what a directory holds (DIR/.).
func remoteBase(p string) string {
	if strings.HasSuffix(p, "/.") || path.Clean(p) == "/" {
		return ""
	}
	return path.Base(path.Clean(p))
}

// unpackLocal unpacks a copy's tar stream at dst as docker cp does: into
// dst when it is a directory, else as dst (the top entry, base, renamed),
// through an os.Root, so that nothing can land outside dst.
func unpackLocal(r io.Reader, dst, base string) error {
	abs, err := filepath.Abs(dst)
	if err != nil {
		return err
	}
	if base == "" { // what a directory holds: into dst, made if need be
		if err := os.Mkdir(abs, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
	}
	dir, req := filepath.Dir(abs), files.Request{Op: files.OpCopyIn, Path: "/" + filepath.Base(abs), Base: base}
	if fi, err := os.Stat(abs); err == nil && fi.IsDir() {
		dir, req.Path = abs, "/"
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	fsys := &files.FS{Root: root, Prefix: "/"}
	err = fsys.Do(context.Background(), req, r, io.Discard)
	if err != nil && strings.HasPrefix(req.Path, "/") {
		// The errors name paths under the root: name them as given.
		msg := strings.ReplaceAll(err.Error(), req.Path+":", dst+":")
		if req.Path == "/" {
			msg = strings.ReplaceAll(err.Error(), "/:", dst+":")
		}
		return errors.New(msg)
	}
	return err
}

// treeSize is the bytes of the regular files under p, for the progress.
func treeSize(p string) int64 {
	var n int64
	_ = filepath.WalkDir(p, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// counting is r, reporting what was read through it to progress (when
// set).
func counting(r io.Reader, total int64, progress func(copied, total int64)) io.Reader {
	if progress == nil {
		return r
	}
	progress(0, total)
	return &countingReader{r: r, total: total, progress: progress}
}

type countingReader struct {
	r        io.Reader
	n, total int64
	progress func(copied, total int64)
}

func (c *countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	if n > 0 {
		c.n += int64(n)
		c.progress(c.n, c.total)
	}
	return n, err
}
