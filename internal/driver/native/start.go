package native

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/cgroups"
	"github.com/corral-sandbox/corral/internal/control"
	"github.com/corral-sandbox/corral/internal/diskimage"
	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/driver/native/shim"
	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/policy"
	"github.com/corral-sandbox/corral/internal/supervisor"
)

// namespaces are the namespaces every supervisor starts in.
const namespaces = unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC | unix.CLONE_NEWNET

// killGrace is how long a supervisor gets past its stop timeout before the
// driver kills it.
const killGrace = 5 * time.Second

// pollInterval is how often the driver looks whether a supervisor is gone.
const pollInterval = time.Millisecond

// Start implements driver.Driver. It returns once the supervisor reports
// that the main process runs.
func (d *Driver) Start(ctx context.Context, ref driver.Ref) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	defer d.lock(ref.ID)()
	o, err := d.load(ref.ID)
	if err != nil {
		return err
	}
	if o.Generation != ref.Generation {
		return errdefs.FailedPrecondition("sandbox %s is at generation %d, not %d", ref.ID, o.Generation, ref.Generation)
	}
	b := d.bundle(o.ID, o.Generation)
	live, err := alive(b)
	if err != nil {
		return err
	}
	if live {
		if d.awaitRunning(ctx, o.ID, o.Generation) {
			return d.attachEgress(ctx, ref) // a start whose answer was lost may not have
		}
		// Shutting down, or not answering: let it go, then start afresh.
		if err := d.stopIncarnation(ctx, o.ID, o.Generation, driver.StopOptions{Timeout: killGrace}); err != nil {
			return err
		}
	}
	return d.spawn(ctx, o, b)
}

// awaitRunning reports whether the live supervisor of an incarnation runs
// its main process, giving one that is still setting up (started by a
// gateway that died before it answered) killGrace to say so.
func (d *Driver) awaitRunning(ctx context.Context, id string, gen int64) bool {
	limit := time.Now().Add(killGrace)
	for {
		state, err := d.status(id, gen)
		switch {
		case err == nil:
			return state == control.StateRunning
		case !errors.Is(err, control.ErrGone) || ctx.Err() != nil || time.Now().After(limit):
			return false
		}
		time.Sleep(10 * pollInterval)
	}
}

// status asks a supervisor for its state.
func (d *Driver) status(id string, gen int64) (string, error) {
	c, err := control.Dial(d.socket(id, gen))
	if err != nil {
		return "", err
	}
	defer c.Close()
	if err := c.Send(control.Request{Op: control.OpStatus}); err != nil {
		return "", err
	}
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	r, err := c.Recv()
	return r.State, err
}

// spawn starts the supervisor of an incarnation, detached from the gateway
// (its own session and namespaces), and waits for it to report readiness:
// it takes the incarnation's lock and clears what an earlier supervisor
// left, writes the supervisor's config, starts it, serves its egress, and
// reads its report.
func (d *Driver) spawn(ctx context.Context, o *object, b shim.Bundle) error {
	lock, err := d.claimBundle(ctx, o, b)
	if err != nil {
		return err
	}
	handed := false
	defer func() {
		if !handed {
			lock.Close()
		}
	}()
	cfg, err := d.supervisorConfig(o)
	if err != nil {
		return err
	}
	if err := b.WriteConfig(cfg); err != nil {
		return fmt.Errorf("native start: %w", err)
	}
	log, err := os.OpenFile(b.Path(shim.SupervisorLog), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("native start: %w", err)
	}
	defer log.Close()
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("native start: %w", err)
	}
	defer readyR.Close()

	pid, err := d.startSupervisor(b.Dir, readyW, lock, log)
	readyW.Close()
	lock.Close() // the supervisor's copy holds it now
	handed = true
	if err != nil {
		return fmt.Errorf("native start: run the supervisor: %w", err)
	}
	defer d.refillStandby() // the next start's, once this one has answered
	if d.cfg.Egress != nil {
		// Its namespaces exist from the clone on; its main process waits
		// for the proxy.
		netns := fmt.Sprintf("/proc/%d/ns/net", pid)
		if err := d.cfg.Egress.Attach(ctx, driver.Ref{ID: o.ID, Generation: o.Generation}, netns); err != nil {
			return err
		}
	}
	return d.awaitReady(ctx, o, b, readyR)
}

// claimBundle takes the lock of incarnation o's bundle and clears what an
// earlier supervisor of it left (its files, its cgroup).
func (d *Driver) claimBundle(ctx context.Context, o *object, b shim.Bundle) (*os.File, error) {
	if err := os.MkdirAll(b.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("native start: %w", err)
	}
	// The lock comes first, and is inherited by the supervisor (or handed
	// to a standby): a supervisor that this gateway dies before seeing
	// still holds it, and is never started twice. Without it nothing of
	// the incarnation is touched: another gateway starting it at the same
	// moment may hold it, and clearing its bundle and cgroup killed the
	// sandbox that one had just started.
	lock, err := shim.Lock(b.Path(shim.LockFile))
	if err != nil {
		return nil, fmt.Errorf("native start: %w", err)
	}
	for _, f := range []string{shim.ExitFile, shim.PIDFile, supervisor.ProtectionsFile, shim.StdoutFile, shim.StderrFile,
		shim.StdoutFile + shim.RotatedSuffix, shim.StderrFile + shim.RotatedSuffix, shim.SupervisorLog, shim.GVisorDir} {
		if err := os.RemoveAll(b.Path(f)); err != nil {
			lock.Close()
			return nil, fmt.Errorf("native start: %w", err)
		}
	}
	if err := removeCgroup(ctx, o.ID); err != nil { // a killed supervisor's
		lock.Close()
		return nil, err
	}
	return lock, nil
}

// supervisorConfig is what incarnation o's supervisor runs: the policy as
// its tier enforces it, the environment, root, workdir (made ready for
// its user), limits and egress.
func (d *Driver) supervisorConfig(o *object) (shim.SandboxConfig, error) {
	pol, ids := o.Policy, o.ids()
	if ids != nil { // root inside is for those who ask for it
		pol = pol.WithDefaultUser()
	}
	var (
		runsc string
		files *policy.Filesystem
	)
	if pol.GVisor() {
		// gVisor's kernel keeps the sandbox's ids apart from the host's,
		// and has no Landlock: the root's mounts enforce the file lists.
		var err error
		if runsc, err = d.runsc(); err != nil {
			return shim.SandboxConfig{}, errdefs.InvalidArgument("isolation: gvisor: %v", err)
		}
		ids = nil
		if pol.Filesystem.Set {
			lists := pol.Filesystem
			files = &lists
			pol.Process.NoNewPrivileges = true // as the exec stage sets it under file lists
		}
		pol.Filesystem = policy.Filesystem{}
	}
	cfg := shim.SandboxConfig{
		ID: o.ID, Generation: o.Generation, Hostname: hostname(o.Name), Command: o.Command,
		Env:    d.sandboxEnv(o, pol),
		RootFS: o.RootFS, Workdir: d.workdir(o.ID), Hide: d.opts.Hide, Dir: o.Dir,
		Socket: d.socket(o.ID, o.Generation), Cgroup: cgroup(o.ID),
		Limits: pol.Limits, IDs: ids, Runsc: runsc, Files: files, LogMaxBytes: d.cfg.LogMax(),
		Checkpointable: runsc != "" && pol.Lifecycle.MemorySnapshots,
	}
	if o.ImageID != "" {
		cfg.Layers = d.layerPaths(o)
	}
	if d.cfg.Egress != nil {
		trust, err := d.cfg.Egress.Prepare(o.ID)
		if err != nil {
			return shim.SandboxConfig{}, fmt.Errorf("native start: egress: %w", err)
		}
		env, err := d.cfg.Egress.Env(driver.Ref{ID: o.ID, Generation: o.Generation}, pol.Credentials)
		if err != nil {
			return shim.SandboxConfig{}, fmt.Errorf("native start: egress: %w", err)
		}
		cfg.Trust, cfg.Env = trust, driver.WithEnv(cfg.Env, env) // over an image's own
	}
	owner := -1 // the workdir's owner on the host; -1: leave it
	if uid := pol.Process.RunAsUser; uid != nil {
		owner = *uid
		if ids != nil {
			owner = ids.Host(owner)
		}
	}
	if err := d.prepareWorkdir(o, pol, &cfg, owner); err != nil {
		return shim.SandboxConfig{}, err
	}
	return cfg, nil
}

// awaitReady reads the supervisor's report on ready: "ok" once the main
// process runs, else why it could not start it.
func (d *Driver) awaitReady(ctx context.Context, o *object, b shim.Bundle, ready io.Reader) error {
	answer := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(ready).ReadString('\n')
		answer <- strings.TrimSpace(line)
	}()
	select {
	case line := <-answer:
		if line == "ok" {
			return nil
		}
		// The supervisor exits after its report: a start that failed
		// returns once it is gone, leaving the incarnation created.
		if err := d.stopIncarnation(ctx, o.ID, o.Generation, driver.StopOptions{Force: true}); err != nil {
			return err
		}
		if reason, ok := strings.CutPrefix(line, shim.ReadyCommandFailed); ok {
			return errdefs.InvalidArgument("the sandbox's command cannot run: %s", reason)
		}
		if reason, ok := strings.CutPrefix(line, shim.ReadyFailed); ok {
			return fmt.Errorf("the sandbox did not start: %s", reason)
		}
		return fmt.Errorf("the supervisor exited before the main process started%s", shim.LastLine(b.Path(shim.SupervisorLog)))
	case <-ctx.Done():
		return fmt.Errorf("waiting for the main process to start: %w", ctx.Err())
	}
}

// prepareWorkdir gives the sandbox's workdir to owner (a host uid, or -1
// for none): its directory, or, with limits.disk, its disk image, made or
// grown to size.
// A disk is set when the sandbox is created: one added later would hide
// what its directory holds, and one is never taken away (what it holds
// stays, at its size).
func (d *Driver) prepareWorkdir(o *object, pol policy.Policy, cfg *shim.SandboxConfig, owner int) error {
	img := filepath.Join(d.sandboxDir(o.ID), "disk.ext4")
	_, err := os.Stat(img)
	hasDisk := err == nil
	if size := pol.Limits.DiskBytes; size > 0 {
		if o.ids() == nil {
			return errdefs.InvalidArgument("limits.disk needs a gateway that runs as root (a loop device for the sandbox's disk)")
		}
		if !hasDisk {
			if entries, _ := os.ReadDir(cfg.Workdir); len(entries) > 0 {
				return errdefs.InvalidArgument("limits.disk is set when a sandbox is created: /sandbox of %s already holds files outside a disk", o.Name)
			}
		}
		if err := diskimage.Ensure(img, size, owner, owner); err != nil {
			return fmt.Errorf("native start: the disk of /sandbox: %w", err)
		}
		hasDisk = true
	}
	if hasDisk {
		cfg.WorkdirImage, cfg.WorkdirOwner = img, owner
		return nil
	}
	if owner < 0 {
		return nil
	}
	if err := supervisor.GiveTree(cfg.Workdir, owner, owner); err != nil {
		return fmt.Errorf("native start: give /sandbox to host user %d: %w", owner, err)
	}
	return nil
}

// sandboxEnv is the environment of a sandbox's processes (its image's,
// when it has one), with the policy for the exec stage (which removes it).
func (d *Driver) sandboxEnv(o *object, pol policy.Policy) []string {
	env := append(imageEnv(o.Env), "HOSTNAME="+hostname(o.Name), supervisor.PolicyEnv+"="+supervisor.PolicyJSON(pol))
	return append(env, d.opts.Env...)
}

func (d *Driver) workdir(id string) string {
	return d.sandboxDir(id) + "/workdir"
}

// hostname is a sandbox name cut to what a hostname holds.
func hostname(name string) string {
	if len(name) > 63 {
		return name[:63]
	}
	return name
}

// Stop implements driver.Driver: every live incarnation of the sandbox
// stops, and Stop returns once their supervisors are gone.
func (d *Driver) Stop(ctx context.Context, ref driver.Ref, opts driver.StopOptions) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	defer d.lock(ref.ID)()
	if _, err := d.load(ref.ID); errors.Is(err, errdefs.ErrNotFound) {
		return nil
	} else if err != nil {
		return err
	}
	for _, g := range d.generations(ref.ID) {
		if err := d.stopIncarnation(ctx, ref.ID, g, opts); err != nil {
			return err
		}
	}
	return nil
}

// stopIncarnation asks the supervisor of one incarnation to stop, and
// waits until it is gone: it is killed when it outlives the stop timeout by
// killGrace, or does not answer.
func (d *Driver) stopIncarnation(ctx context.Context, id string, gen int64, opts driver.StopOptions) error {
	b := d.bundle(id, gen)
	live, err := alive(b)
	if err != nil || !live {
		return err
	}
	// a paused incarnation is thawed: its processes then take the stop
	if err := cgroups.Freeze(workload(id), false); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	deadline := time.Now().Add(opts.Timeout + killGrace)
	if opts.Force {
		deadline = time.Now().Add(killGrace)
	}
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl.Add(-100 * time.Millisecond) // leave time to kill it
	}
	if c, err := control.Dial(d.socket(id, gen)); err == nil {
		err = c.Send(control.Request{Op: control.OpStop, TimeoutMillis: opts.Timeout.Milliseconds(), Force: opts.Force})
		if err == nil {
			_ = c.SetDeadline(deadline)
			for err == nil {
				_, err = c.Recv() // the stream ends when the supervisor exits
			}
		}
		c.Close()
		if errors.Is(err, io.EOF) {
			deadline = time.Now().Add(killGrace) // closing; it is gone in a moment
		}
	}
	if waitGone(ctx, b, deadline) {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("waiting for sandbox %s generation %d to stop: %w", id, gen, err)
	}
	// It did not stop in time, or does not answer: kill it. Its pid is
	// trusted only while its lock says it lives.
	if pid, err := readPID(b); err == nil {
		if live, _ := alive(b); live {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
	}
	if waitGone(ctx, b, time.Now().Add(killGrace)) {
		return nil
	}
	return fmt.Errorf("the supervisor of sandbox %s generation %d does not go away", id, gen)
}

// waitGone polls until the supervisor of b is gone, ctx ends or the
// deadline passes; it reports whether it is gone.
func waitGone(ctx context.Context, b shim.Bundle, deadline time.Time) bool {
	for {
		if live, err := alive(b); err == nil && !live {
			return true
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return false
		}
		time.Sleep(pollInterval)
	}
}

func readPID(b shim.Bundle) (int, error) {
	data, err := os.ReadFile(b.Path(shim.PIDFile))
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(data)))
}

// removeCgroup removes a sandbox's cgroup once no supervisor of it lives:
// whatever is still in it is killed (it can only be left over), and the
// kernel gets a moment to let go of processes that just died.
func removeCgroup(ctx context.Context, id string) error {
	var err error
	for range 100 {
		if err = cgroups.Kill(cgroup(id)); err == nil {
			err = cgroups.Remove(cgroup(id))
		}
		if err == nil || ctx.Err() != nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	return err
}

// attachEgress serves the egress proxy in the network namespace of a live
// supervisor, when the gateway has one.
func (d *Driver) attachEgress(ctx context.Context, ref driver.Ref) error {
	if d.cfg.Egress == nil {
		return nil
	}
	return d.AttachEgress(ctx, ref)
}

// NetNS returns /proc/PID/ns/net of incarnation ref's supervisor;
// errdefs.ErrNotFound when it does not run.
func (d *Driver) NetNS(ctx context.Context, ref driver.Ref) (string, error) {
	b := d.bundle(ref.ID, ref.Generation)
	if live, err := alive(b); err != nil || !live {
		return "", errdefs.NotFound("no supervisor of sandbox %s at generation %d runs", ref.ID, ref.Generation)
	}
	pid, err := readPID(b)
	if err != nil {
		return "", fmt.Errorf("native: the supervisor's pid: %w", err)
	}
	return fmt.Sprintf("/proc/%d/ns/net", pid), nil
}

var _ driver.Workdirs = (*Driver)(nil)

// Workdir implements driver.Workdirs: the sandbox's workdir directory. A
// /sandbox on a disk image (limits.disk) is mounted only inside a running
// sandbox's namespace, so it cannot be reached while the sandbox is
// stopped.
func (d *Driver) Workdir(ctx context.Context, id string) (string, error) {
	if _, err := d.load(id); err != nil {
		return "", err
	}
	if _, err := os.Stat(filepath.Join(d.sandboxDir(id), "disk.ext4")); err == nil {
		return "", errdefs.FailedPrecondition("sandbox %s keeps /sandbox on its own disk (limits.disk), mounted only while it runs: start it to reach its files", id)
	}
	return d.workdir(id), nil
}
