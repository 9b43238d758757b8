package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
	corral "github.com/corral-sandbox/corral/client"
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
				return c.Explain(copyOut(cmd.Context(), c, srcName, srcPath, dstPath))
			}
			return c.Explain(copyIn(cmd.Context(), c, srcPath, dstName, dstPath))
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

// copyOut copies NAME:src to dst (a local path, or - for a tar stream on
// stdout), with the copy's progress on a terminal's stderr.
func copyOut(ctx context.Context, c *corral.Client, name, src, dst string) error {
	bar := newCopyProgress(os.Stderr, name+":"+src)
	defer bar.finish()
	var err error
	if dst == "-" {
		err = c.CopyOut(ctx, name, src, os.Stdout)
	} else {
		err = c.CopyFrom(ctx, name, src, dst, corral.CopyOptions{Progress: bar.update})
	}
	bar.done = err == nil
	return err
}

// copyIn copies src (a local path, or - for a tar stream on stdin) to
// NAME:dst, with the copy's progress on a terminal's stderr.
func copyIn(ctx context.Context, c *corral.Client, src, name, dst string) error {
	bar := newCopyProgress(os.Stderr, name+":"+dst)
	defer bar.finish()
	var err error
	if src == "-" {
		_, err = c.CopyIn(ctx, name, dst, "", bar.reader(os.Stdin))
	} else {
		err = c.CopyTo(ctx, src, name, dst, corral.CopyOptions{Progress: bar.update})
	}
	bar.done = err == nil
	return err
}

// copyProgress shows a copy's bytes on a terminal, redrawn in place at
// most every progressEvery, and what was copied at the end; elsewhere it
// shows nothing.
type copyProgress struct {
	w       io.Writer
	tty     bool
	what    string
	total   atomic.Int64
	current atomic.Int64
	stop    chan struct{}
	ended   chan struct{}
	done    bool // the copy succeeded
}

const progressEvery = 100 * time.Millisecond

func newCopyProgress(w io.Writer, what string) *copyProgress {
	p := &copyProgress{w: w, tty: isTerminal(w), what: what, stop: make(chan struct{}), ended: make(chan struct{})}
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
	msg := &corralv1.PullImageProgress{Status: "copying " + p.what, Current: p.current.Load(), Total: p.total.Load()}
	if msg.Total > 0 && msg.Current > msg.Total {
		msg.Total = msg.Current
	}
	fmt.Fprintf(p.w, "\r\x1b[K%s", progressLine(msg, true))
}

// update takes a copy's progress (corral.CopyOptions.Progress).
func (p *copyProgress) update(copied, total int64) {
	p.current.Store(copied)
	p.total.Store(total)
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
