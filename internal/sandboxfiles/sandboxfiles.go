// Package sandboxfiles reaches the files of sandboxes for every front
// end: read, write (atomically), list, stat, remove, make directories,
// copy trees in and out as tar streams, watch a directory. In a ready
// sandbox an operation runs inside, through the exec stage, as the
// sandbox's user under its policy; in a stopped one it runs from the host
// on its /sandbox directory (driver.Workdirs), under the policy's file
// lists. It needs of the core only the sandboxes' records.
package sandboxfiles

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"
	"syscall"

	"github.com/corral-sandbox/corral/internal/capped"
	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/files"
	"github.com/corral-sandbox/corral/internal/lifecycle"
	"github.com/corral-sandbox/corral/internal/policy"
	"github.com/corral-sandbox/corral/internal/safetar"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

// stderrCap bounds what is kept of a file operation's stderr.
const stderrCap = 64 << 10

// streamBuffer is how much of a streamed output is gathered before it is
// passed on.
const streamBuffer = 256 << 10

// Records finds sandboxes' records (*lifecycle.Manager does).
type Records interface {
	Get(ctx context.Context, nameOrID string) (*sandbox.Sandbox, error)
	// Awake resumes a paused sandbox whose policy says so, and refuses
	// one whose policy does not.
	Awake(ctx context.Context, sb *sandbox.Sandbox) (*sandbox.Sandbox, error)
}

// Files runs file operations on sandboxes.
type Files struct {
	records Records
	driver  driver.Driver
}

// New is the file operations on the sandboxes of records, run by drv.
func New(records Records, drv driver.Driver) *Files { return &Files{records: records, driver: drv} }

// Do runs one file operation on a sandbox's files, its input read from
// stdin and its output written to stdout as it goes (nothing is held
// whole): in a ready sandbox inside it, in a stopped (or exited, or
// failed) one from the host on its /sandbox directory, which the driver
// keeps.
func (f *Files) Do(ctx context.Context, nameOrID string, req files.Request, stdin io.Reader, stdout io.Writer) error {
	sb, err := f.records.Get(ctx, nameOrID)
	if err != nil {
		return err
	}
	if !strings.HasPrefix(req.Path, "/") {
		return errdefs.InvalidArgument("%q: a path in sandbox %q must be absolute", req.Path, sb.Name)
	}
	if slices.Contains(strings.Split(req.Path, "/"), "..") {
		return errdefs.InvalidArgument("path %q: \"..\" is not taken; give the path without it", req.Path)
	}
	if err := lifecycle.ValidateCommand(sb.Name, "file operation", files.Argv(req)); err != nil {
		return err
	}
	if sb, err = f.records.Awake(ctx, sb); err != nil {
		return err
	}
	switch sb.Phase {
	case sandbox.PhaseReady:
		return f.inside(ctx, sb, req, stdin, stdout)
	case sandbox.PhaseStopped, sandbox.PhaseExited, sandbox.PhaseError:
		if req.Op == files.OpWatch {
			return errdefs.FailedPrecondition("sandbox %q is %s, not running: watch needs a running sandbox", sb.Name, sb.Phase)
		}
		return f.onHost(ctx, sb, req, stdin, stdout)
	}
	return errdefs.FailedPrecondition("sandbox %q is %s: its files can be reached once it is ready or stopped", sb.Name, sb.Phase)
}

// inside runs the operation in the sandbox: the exec stage runs
// files.Command itself once it has applied the policy.
func (f *Files) inside(ctx context.Context, sb *sandbox.Sandbox, req files.Request, stdin io.Reader, stdout io.Writer) error {
	x, ok := f.driver.(driver.Execer)
	if !ok {
		return errdefs.NotImplemented("the %s driver cannot run file operations in sandboxes", f.driver.Name())
	}
	if stdin == nil && req.Op == files.OpWatch {
		// The watch inside ends when its input does: when the caller goes.
		r, w := io.Pipe()
		stop := context.AfterFunc(ctx, func() { w.Close() })
		defer stop()
		defer w.Close()
		stdin = r
	}
	stderr := capped.New(stderrCap)
	var out *bufio.Writer
	if req.Op == files.OpCopyOut || req.Op == files.OpRead {
		// Whole chunks of the stream, whatever size the driver writes in.
		out = bufio.NewWriterSize(stdout, streamBuffer)
		stdout = out
	}
	code, err := x.Exec(ctx, sb.ID, driver.ExecOptions{Command: files.Argv(req), Stdin: stdin, Stdout: stdout, Stderr: stderr})
	if err == nil && out != nil {
		err = out.Flush()
	}
	if err != nil {
		return err
	}
	if ferr := files.ParseErr(stderr.String()); ferr != nil {
		return ferr
	}
	if code != 0 {
		return fmt.Errorf("sandbox %q: file operation %s on %s exited %d: %s", sb.Name, req.Op, req.Path, code, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// onHost runs the operation on the stopped sandbox's /sandbox from
// the host, through an os.Root of it; new files get the owner of its top
// directory (the sandbox's user), and the policy's file lists decide what
// may be written.
func (f *Files) onHost(ctx context.Context, sb *sandbox.Sandbox, req files.Request, stdin io.Reader, stdout io.Writer) error {
	wd, ok := f.driver.(driver.Workdirs)
	if !ok {
		return errdefs.FailedPrecondition("sandbox %q is %s, not running, and the %s driver cannot reach its files then: start it", sb.Name, sb.Phase, f.driver.Name())
	}
	dir, err := wd.Workdir(ctx, sb.ID)
	if err != nil {
		return err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("sandbox %q: open its /sandbox: %w", sb.Name, err)
	}
	defer root.Close()
	fi, err := root.Stat(".")
	if err != nil {
		return fmt.Errorf("sandbox %q: its /sandbox: %w", sb.Name, err)
	}
	fsys := &files.FS{Root: root, Prefix: "/sandbox"}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		fsys.Owner = &safetar.Owner{UID: int(st.Uid), GID: int(st.Gid)}
	}
	pol, err := policy.Parse(sb.Spec.Policy)
	if err != nil {
		return fmt.Errorf("sandbox %q: its policy: %w", sb.Name, err)
	}
	fsys.Writable = allowed(pol, false)
	fsys.Readable = allowed(pol, true)
	return fsys.Do(ctx, req, stdin, stdout)
}

// allowed is what the policy's Landlock rules let the sandbox write (or,
// with read, read), or nil when they do not restrict it.
func allowed(p policy.Policy, read bool) func(string) bool {
	if !p.Filesystem.Set {
		return nil
	}
	rw := slices.Clone(p.Filesystem.ReadWrite)
	if read {
		rw = append(rw, p.Filesystem.ReadOnly...)
	}
	if p.Filesystem.IncludeWorkdir {
		rw = append(rw, "/sandbox")
	}
	return func(name string) bool {
		for _, r := range rw {
			r = path.Clean(r)
			if name == r || strings.HasPrefix(name, r+"/") || r == "/" {
				return true
			}
		}
		return false
	}
}
