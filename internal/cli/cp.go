package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
	"github.com/corral-sandbox/corral/internal/files"
)

func newCpCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "cp SRC DST",
		Short: "Copy files and directory trees between a sandbox and here, as docker cp",
		Long: `Copy files and directory trees between a sandbox and the local file system,
as docker cp does. One side is NAME:PATH (a relative PATH is under /sandbox);
the other a local path, or - for a tar archive on stdin or stdout. A directory
is copied into an existing directory, or made under a new name; SRC/. copies
what a directory holds. Modes and modification times are kept, symlinks are
copied as links. A stopped sandbox's /sandbox can be copied too.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			srcName, srcPath, srcRemote := splitRemote(args[0])
			dstName, dstPath, dstRemote := splitRemote(args[1])
			if srcRemote == dstRemote {
				return errors.New("usage: corral sandbox cp NAME:PATH LOCAL, or LOCAL NAME:PATH: exactly one side is in a sandbox")
			}
			c, err := g.dial()
			if err != nil {
				return err
			}
			defer c.Close()
			if srcRemote {
				return c.explain(copyOut(cmd.Context(), c, srcName, srcPath, dstPath))
			}
			return c.explain(copyIn(cmd.Context(), c, srcPath, dstName, dstPath))
		},
	}
}

// splitRemote splits NAME:PATH; a local path holding a colon can be given
// as ./a:b. A relative PATH is in the sandbox's workdir.
func splitRemote(arg string) (name, p string, remote bool) {
	name, p, ok := strings.Cut(arg, ":")
	if !ok || name == "" || strings.Contains(name, "/") {
		return "", arg, false
	}
	if !strings.HasPrefix(p, "/") {
		p = "/sandbox/" + p
	}
	return name, p, true
}

// remoteBase is the name of a remote path's top entry in a copy's tar
// stream; "" when the path asks for what a directory holds (DIR/.).
func remoteBase(p string) string {
	if strings.HasSuffix(p, "/.") || path.Clean(p) == "/" {
		return ""
	}
	return path.Base(path.Clean(p))
}

// copyOut copies NAME:src to dst (a local path, or - for stdout).
func copyOut(ctx context.Context, c *client, name, src, dst string) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var total int64
	if st, err := c.files.StatFile(ctx, &corralv1.StatFileRequest{Sandbox: name, Path: src}); err != nil {
		return err
	} else if st.Type == "file" {
		total = st.Size
	}
	stream, err := c.files.CopyOut(ctx, &corralv1.CopyOutRequest{Sandbox: name, Path: src})
	if err != nil {
		return err
	}
	r, w := io.Pipe()
	go func() {
		for {
			msg, err := stream.Recv()
			if err != nil {
				if err == io.EOF {
					err = nil
				}
				w.CloseWithError(err)
				return
			}
			if _, err := w.Write(msg.GetData()); err != nil {
				return
			}
		}
	}()
	bar := newCopyProgress(os.Stderr, name+":"+src, total)
	defer bar.finish()
	in := bar.reader(r)
	if dst == "-" {
		_, err := io.Copy(os.Stdout, in)
		return err
	}
	err = unpackLocal(in, dst, remoteBase(src))
	if err != nil {
		r.CloseWithError(err)
		return err
	}
	bar.done = true
	return nil
}

// unpackLocal unpacks a copy's tar stream at dst as docker cp does: into
// dst when it is a directory, else as dst (the top entry, base, renamed).
// The stream comes from a sandbox, so it is as hostile as any: it is
// unpacked through an os.Root, and nothing can land outside dst.
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

// copyIn copies src (a local path, or - for a tar stream on stdin) to
// NAME:dst.
func copyIn(ctx context.Context, c *client, src, name, dst string) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	header := &corralv1.CopyInHeader{Sandbox: name, Path: dst}
	var in io.Reader = os.Stdin
	var total int64
	if src != "-" {
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
			if err := ensureRemoteDir(ctx, c, name, dst); err != nil {
				return err
			}
		}
		header.Base = top
		total = treeSize(abs)
		root, err := os.OpenRoot(dir)
		if err != nil {
			return err
		}
		defer root.Close()
		r, w := io.Pipe()
		go func() { w.CloseWithError(files.Pack(w, root, rel, top)) }()
		defer r.Close()
		in = r
	}
	stream, err := c.files.CopyIn(ctx)
	if err != nil {
		return err
	}
	if err := stream.Send(&corralv1.CopyInRequest{Msg: &corralv1.CopyInRequest_Header{Header: header}}); err != nil {
		_, err = stream.CloseAndRecv()
		return err
	}
	bar := newCopyProgress(os.Stderr, name+":"+dst, total)
	defer bar.finish()
	src2 := bar.reader(in)
	buf := make([]byte, 256<<10) // a message of the stream
	for {
		n, rerr := io.ReadFull(src2, buf)
		if n > 0 {
			if err := stream.Send(&corralv1.CopyInRequest{Msg: &corralv1.CopyInRequest_Data{Data: buf[:n]}}); err != nil {
				_, err = stream.CloseAndRecv() // the gateway's own reason
				return err
			}
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		if rerr != nil {
			return rerr
		}
	}
	if _, err := stream.CloseAndRecv(); err != nil {
		return err
	}
	bar.done = true
	return nil
}

// ensureRemoteDir makes NAME:dir unless it is there.
func ensureRemoteDir(ctx context.Context, c *client, name, dir string) error {
	_, err := c.files.StatFile(ctx, &corralv1.StatFileRequest{Sandbox: name, Path: dir})
	if status.Code(err) == codes.NotFound {
		_, err = c.files.MakeDir(ctx, &corralv1.MakeDirRequest{Sandbox: name, Path: dir})
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

// copyProgress shows a copy's bytes on a terminal, redrawn in place at
// most every progressEvery, and what was copied at the end; elsewhere it
// shows nothing.
type copyProgress struct {
	w       io.Writer
	tty     bool
	what    string
	total   int64
	current atomic.Int64
	stop    chan struct{}
	ended   chan struct{}
	done    bool // the copy succeeded
}

const progressEvery = 100 * time.Millisecond

func newCopyProgress(w io.Writer, what string, total int64) *copyProgress {
	p := &copyProgress{w: w, tty: isTerminal(w), what: what, total: total, stop: make(chan struct{}), ended: make(chan struct{})}
	if !p.tty {
		close(p.ended)
		return p
	}
	go func() {
		defer close(p.ended)
		t := time.NewTicker(progressEvery)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-t.C:
				p.draw()
			}
		}
	}()
	return p
}

func (p *copyProgress) draw() {
	msg := &corralv1.PullImageProgress{Status: "copying " + p.what, Current: p.current.Load(), Total: p.total}
	if msg.Total > 0 && msg.Current > msg.Total {
		msg.Total = msg.Current
	}
	fmt.Fprintf(p.w, "\r\x1b[K%s", progressLine(msg, true))
}

// reader counts what is read through it.
func (p *copyProgress) reader(r io.Reader) io.Reader { return countingReader{r, &p.current} }

func (p *copyProgress) finish() {
	close(p.stop)
	<-p.ended
	if p.tty {
		fmt.Fprint(p.w, "\r\x1b[K")
		if p.done {
			fmt.Fprintf(p.w, "Successfully copied %s (%s)\n", humanSize(p.current.Load()), printableText(p.what))
		}
	}
}

type countingReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n.Add(int64(n))
	return n, err
}
