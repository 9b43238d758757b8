package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/corral-sandbox/corral/internal/control"
	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/policy"
	"github.com/corral-sandbox/corral/internal/supervisor"
)

var (
	_ driver.Execer    = (*Driver)(nil)
	_ driver.LogReader = (*Driver)(nil)
)

// running returns the running container of a sandbox.
func (d *Driver) running(ctx context.Context, id string) (container.Summary, error) {
	list, err := d.containers(ctx, id)
	if err != nil {
		return container.Summary{}, err
	}
	if len(list) == 0 || stateOf(list[0].State) != driver.StateRunning {
		return container.Summary{}, errdefs.FailedPrecondition("sandbox %s has no running container", id)
	}
	return list[0], nil
}

// Exec implements driver.Execer: the command runs through the supervisor's
// exec stage, so what protects the main process protects it too. The
// supervisor, PID 1 of the container, starts it when asked on its control
// socket (a spare exec stage started ahead takes it: no engine call, no
// program start); a container without one (gVisor's, one made by an
// earlier corral, one whose root replaced it with something else) gets the
// engine's exec of the exec stage.
func (d *Driver) Exec(ctx context.Context, id string, opts driver.ExecOptions) (int, error) {
	if gen, ok := d.lastRan(id); ok {
		// A supervisor that answers there runs: the engine need not say so.
		if conn, err := d.dialControl(id, gen); err == nil {
			return control.Exec(ctx, conn, id, opts)
		}
	}
	c, err := d.running(ctx, id)
	if err != nil {
		return 0, err
	}
	if gen := generation(c.Labels); c.Labels[labelIsolation] != policy.IsolationGVisor {
		d.ran(id, gen)
		if conn, err := d.dialControl(id, gen); err == nil {
			return control.Exec(ctx, conn, id, opts)
		}
	}
	return d.engineExec(ctx, c.ID, opts)
}

// dialControl connects to the control socket of an incarnation.
func (d *Driver) dialControl(id string, gen int64) (*control.Conn, error) {
	return control.Dial(filepath.Join(d.readyDir(id, gen), controlName))
}

// ran notes the generation a sandbox runs (0: none, deleted).
func (d *Driver) ran(id string, gen int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if gen == 0 {
		delete(d.started, id)
		return
	}
	d.started[id] = gen
}

// lastRan returns the generation a sandbox last ran, if this driver saw it.
func (d *Driver) lastRan(id string) (int64, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	gen, ok := d.started[id]
	return gen, ok
}

// engineExec runs opts.Command through the exec stage by the engine's exec.
func (d *Driver) engineExec(ctx context.Context, cid string, opts driver.ExecOptions) (int, error) {
	size := client.ConsoleSize{Height: opts.Size.Rows, Width: opts.Size.Cols}
	created, err := d.api.ExecCreate(ctx, cid, client.ExecCreateOptions{
		Cmd:          supervisor.ExecArgv(supervisorPath, supervisor.ExecStage{}, opts.Command),
		TTY:          opts.TTY,
		ConsoleSize:  size,
		AttachStdin:  opts.Stdin != nil,
		AttachStdout: true,
		AttachStderr: true, // in the container's working directory, as root: the exec stage switches
	})
	if err != nil {
		return 0, d.wrap(err, "exec")
	}
	att, err := d.api.ExecAttach(ctx, created.ID, client.ExecAttachOptions{TTY: opts.TTY, ConsoleSize: size})
	if err != nil {
		return 0, d.wrap(err, "attach exec")
	}
	defer att.Close()
	if opts.Stdin != nil {
		go func() {
			// 256 KiB writes (a file copied in): io.Copy would write 32 KiB at a time
			_, _ = io.CopyBuffer(struct{ io.Writer }{att.Conn}, opts.Stdin, make([]byte, 256<<10))
			_ = att.CloseWrite()
		}()
	}
	go func() {
		for s := range opts.Resize {
			_, _ = d.api.ExecResize(ctx, created.ID, client.ExecResizeOptions{Height: s.Rows, Width: s.Cols})
		}
	}()
	copied := make(chan error, 1)
	go func() {
		if opts.TTY {
			_, err := io.Copy(opts.Stdout, att.Reader)
			copied <- err
			return
		}
		_, err := stdcopy.StdCopy(opts.Stdout, opts.Stderr, att.Reader)
		copied <- err
	}()
	select {
	case <-ctx.Done():
		return 0, ctx.Err()
	case err := <-copied:
		// Podman resets the connection when it ends an exec that left
		// some of its stdin unread (a copy into a full disk): what the
		// exec wrote came before the reset, so it ends the output as EOF
		// would, and the exit code says how the exec ended.
		if err != nil && !errors.Is(err, syscall.ECONNRESET) {
			return 0, fmt.Errorf("exec output: %w", err)
		}
	}
	for {
		res, err := d.api.ExecInspect(ctx, created.ID, client.ExecInspectOptions{})
		if err != nil {
			return 0, d.wrap(err, "inspect exec")
		}
		if !res.Running {
			return res.ExitCode, nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// Logs implements driver.LogReader with the newest container's log.
func (d *Driver) Logs(ctx context.Context, id string, opts driver.LogOptions, stdout, stderr io.Writer) error {
	list, err := d.containers(ctx, id)
	if err != nil {
		return err
	}
	if len(list) == 0 {
		return errdefs.NotFound("no container for sandbox %s", id)
	}
	tail := "all"
	if opts.Tail > 0 {
		tail = strconv.Itoa(opts.Tail)
	}
	rc, err := d.api.ContainerLogs(ctx, list[0].ID, client.ContainerLogsOptions{
		ShowStdout: true, ShowStderr: true, Follow: opts.Follow, Tail: tail,
	})
	if err != nil {
		return d.wrap(err, "logs")
	}
	defer rc.Close()
	_, err = stdcopy.StdCopy(stdout, stderr, rc)
	if ctx.Err() != nil {
		return nil
	}
	return err
}
