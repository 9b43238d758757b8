// Package docker is the compute driver for Docker Engine. Every sandbox
// incarnation is one container, labelled with the gateway's label, the
// sandbox id and the generation, and found by those labels; the sandbox's
// workdir (/sandbox) is a labelled volume that outlives incarnations. The
// gateway's own static binary is mounted read-only into every container and
// runs as its entrypoint (`corral supervise`), so any image works.
package docker

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/netns"
	"github.com/corral-sandbox/corral/internal/policy"
)

// Options configure the Docker driver.
type Options struct {
	// Host is the engine address (unix:///var/run/docker.sock); empty
	// means DOCKER_HOST or the default socket.
	Host string
	// PullPolicy is never, if_not_present or always.
	PullPolicy string
	// Supervisor is the host path of the static corral binary to mount.
	Supervisor string
	// GVisorRuntime is the engine's name of its runsc runtime
	// (default "runsc"): sandboxes with isolation: gvisor run under it.
	GVisorRuntime string
	// Env is added to every sandbox's environment (tests give a test
	// build of the supervisor a simulated kernel this way:
	// testbug.LandlockABIEnv).
	Env []string
}

// Paths inside every container.
const (
	supervisorPath = "/.corral/bin/corral"
	runDir         = "/.corral/run"
	readyName      = "ready"
	readyFile      = runDir + "/" + readyName
	controlName    = "control.sock"
	controlSocket  = runDir + "/" + controlName
	workdir        = "/sandbox"
)

// Driver is the Docker driver. Its ports and egress are reached from the
// gateway's host, inside each container's network namespace (Reach):
// the engine must run there.
type Driver struct {
	netns.Reach
	cfg  driver.Config
	opts Options
	api  *client.Client
	host string

	mu          sync.Mutex
	userns      bool // the engine remaps user ids (known once usernsKnown)
	usernsKnown bool
	gvisor      *gvisorRuntime           // the engine's runsc runtime, once found
	creates     map[string]*engineCreate // by sandbox: the create the engine is carrying out
	started     map[string]int64         // by sandbox: the generation it last ran (Exec's way to its control socket)
}

var (
	_ driver.Driver         = (*Driver)(nil)
	_ driver.Watcher        = (*Driver)(nil)
	_ driver.PortDialer     = (*Driver)(nil)
	_ driver.EgressAttacher = (*Driver)(nil)
)

// New returns a Docker driver. It does not need the engine to answer yet:
// calls fail with a clear error until it does.
func New(cfg driver.Config, opts Options) (*Driver, error) {
	if cfg.Label == "" {
		return nil, errors.New("docker driver: no sandbox label configured")
	}
	if opts.Supervisor == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("docker driver: find the corral binary to mount: %w", err)
		}
		opts.Supervisor = exe
	}
	if opts.PullPolicy == "" {
		opts.PullPolicy = "if_not_present"
	}
	if opts.GVisorRuntime == "" {
		opts.GVisorRuntime = "runsc"
	}
	clientOpts := []client.Opt{client.FromEnv, client.WithAPIVersionNegotiation()}
	host := opts.Host
	if host != "" {
		clientOpts = append(clientOpts, client.WithHost(host))
	} else if host = os.Getenv("DOCKER_HOST"); host == "" {
		host = client.DefaultDockerHost
	}
	api, err := client.New(clientOpts...)
	if err != nil {
		return nil, fmt.Errorf("docker engine at %s: %w", host, err)
	}
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("docker driver: %w", err)
	}
	d := &Driver{cfg: cfg, opts: opts, api: api, host: host, creates: map[string]*engineCreate{}, started: map[string]int64{}}
	d.Reach = netns.Reach{NetNS: d.netNS, Egress: cfg.Egress}
	return d, nil
}

// Name implements driver.Driver.
func (d *Driver) Name() string { return "docker" }

// Close implements driver.Driver; containers keep running.
func (d *Driver) Close() error { return d.api.Close() }

// Ping checks that the engine answers.
func (d *Driver) Ping(ctx context.Context) error {
	_, err := d.api.Ping(ctx, client.PingOptions{})
	return d.wrap(err, "ping")
}

// wrap names the engine in errors and maps Docker's error classes to ours.
func (d *Driver) wrap(err error, what string) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return fmt.Errorf("docker %s: %w", what, err)
	case client.IsErrConnectionFailed(err):
		return errdefs.Unavailable("docker engine at %s does not answer (%s): is dockerd running?", d.host, rootCause(err))
	case cerrdefs.IsNotFound(err):
		return errdefs.NotFound("docker %s: %w", what, err)
	case cerrdefs.IsInvalidArgument(err):
		return errdefs.InvalidArgument("docker %s: %w", what, err)
	case cerrdefs.IsConflict(err), cerrdefs.IsFailedPrecondition(err):
		return errdefs.FailedPrecondition("docker %s: %w", what, err)
	case cerrdefs.IsAlreadyExists(err):
		return errdefs.AlreadyExists("docker %s: %w", what, err)
	}
	return fmt.Errorf("docker %s: %w", what, err)
}

func rootCause(err error) string {
	for {
		next := errors.Unwrap(err)
		if next == nil {
			return err.Error()
		}
		err = next
	}
}

// containerName is the readable name of a sandbox's container.
func containerName(name, id string) string {
	short := id
	if len(short) > 12 {
		short = short[:12]
	}
	return "corral-" + name + "-" + short
}

// volumeName is the workdir volume of a sandbox; it names the gateway's
// label too, so gateways sharing an engine never share a volume.
func (d *Driver) volumeName(id string) string {
	h := fnv.New32a()
	h.Write([]byte(d.cfg.Label))
	return fmt.Sprintf("corral-%s-%08x-sandbox", id, h.Sum32())
}

// containers lists the containers of this gateway, of one sandbox when id
// is set, newest generation first.
func (d *Driver) containers(ctx context.Context, id string) ([]container.Summary, error) {
	f := client.Filters{}.Add("label", d.cfg.Label+"=true")
	if id != "" {
		f = f.Add("label", driver.LabelSandboxID+"="+id)
	}
	res, err := d.api.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		return nil, d.wrap(err, "list containers")
	}
	list := res.Items
	slices.SortFunc(list, func(a, b container.Summary) int { return int(generation(b.Labels) - generation(a.Labels)) })
	return list, nil
}

func generation(labels map[string]string) int64 {
	g, _ := strconv.ParseInt(labels[driver.LabelGeneration], 10, 64)
	return g
}

func stateOf(s container.ContainerState) driver.State {
	switch s {
	case container.StateCreated:
		return driver.StateCreated
	case container.StateExited, container.StateDead:
		return driver.StateStopped
	case container.StatePaused:
		return driver.StatePaused
	}
	return driver.StateRunning // running, restarting, removing
}

// running is whether a container's processes exist, frozen or not.
func running(s container.ContainerState) bool {
	st := stateOf(s)
	return st == driver.StateRunning || st == driver.StatePaused
}

// Inspect implements driver.Driver.
func (d *Driver) Inspect(ctx context.Context, id string) (driver.Object, error) {
	list, err := d.containers(ctx, id)
	if err != nil {
		return driver.Object{}, err
	}
	if len(list) == 0 {
		return driver.Object{}, errdefs.NotFound("no container for sandbox %s", id)
	}
	c := list[0]
	obj := driver.Object{ID: id, Generation: generation(c.Labels), State: stateOf(c.State), Labels: c.Labels, Message: c.Status}
	if running(c.State) {
		obj.Protections = d.protections(ctx, d.readyDir(id, obj.Generation), c.Labels[labelIsolation] == policy.IsolationGVisor)
	}
	if obj.State == driver.StateStopped {
		res, err := d.api.ContainerInspect(ctx, c.ID, client.ContainerInspectOptions{})
		if err != nil {
			return driver.Object{}, d.wrap(err, "inspect container "+c.Names[0])
		}
		if res.Container.State != nil {
			obj.ExitCode = res.Container.State.ExitCode
			if res.Container.State.OOMKilled {
				obj.Message = "killed: out of memory"
			}
		}
	}
	return obj, nil
}

// List implements driver.Driver: one object per sandbox, its newest
// incarnation.
func (d *Driver) List(ctx context.Context) ([]driver.Object, error) {
	list, err := d.containers(ctx, "")
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var objs []driver.Object
	for _, c := range list {
		id := c.Labels[driver.LabelSandboxID]
		if id == "" || seen[id] {
			continue
		}
		seen[id] = true
		objs = append(objs, driver.Object{ID: id, Generation: generation(c.Labels), State: stateOf(c.State), Labels: c.Labels, Message: c.Status})
	}
	return objs, nil
}

// Leftovers implements driver.Leftovers: the workdir volumes with this
// gateway's label whose sandbox has no container in compute (List's).
func (d *Driver) Leftovers(ctx context.Context, compute []driver.Object) ([]driver.Object, error) {
	withContainer := map[string]bool{}
	for _, o := range compute {
		withContainer[o.ID] = true
	}
	res, err := d.api.VolumeList(ctx, client.VolumeListOptions{Filters: client.Filters{}.Add("label", d.cfg.Label+"=true")})
	if err != nil {
		return nil, d.wrap(err, "list volumes")
	}
	var objs []driver.Object
	for _, v := range res.Items {
		id := v.Labels[driver.LabelSandboxID]
		if id == "" || withContainer[id] || v.Name != d.volumeName(id) {
			continue
		}
		objs = append(objs, driver.Object{ID: id, State: driver.StateStopped, Labels: v.Labels, Message: "workdir volume " + v.Name + " without a container"})
	}
	return objs, nil
}

// Stop implements driver.Driver: every container of the sandbox stops.
func (d *Driver) Stop(ctx context.Context, ref driver.Ref, opts driver.StopOptions) error {
	list, err := d.containers(ctx, ref.ID)
	if err != nil {
		return err
	}
	for _, c := range list {
		if !running(c.State) {
			continue
		}
		if stateOf(c.State) == driver.StatePaused {
			// the engine refuses to stop a paused container
			if _, err := d.api.ContainerUnpause(ctx, c.ID, client.ContainerUnpauseOptions{}); err != nil && !cerrdefs.IsNotFound(err) {
				return d.wrap(err, "unpause container "+c.Names[0])
			}
		}
		if opts.Force {
			_, err = d.api.ContainerKill(ctx, c.ID, client.ContainerKillOptions{Signal: "SIGKILL"})
		} else {
			secs := int(opts.Timeout.Seconds())
			_, err = d.api.ContainerStop(ctx, c.ID, client.ContainerStopOptions{Timeout: &secs})
		}
		if err != nil && !cerrdefs.IsNotFound(err) && !isNotRunning(err) {
			return d.wrap(err, "stop container "+c.Names[0])
		}
	}
	return nil
}

func isNotRunning(err error) bool {
	return cerrdefs.IsConflict(err) && strings.Contains(err.Error(), "is not running")
}

// Delete implements driver.Driver: every container of the sandbox, its
// workdir volume and its ready files go.
func (d *Driver) Delete(ctx context.Context, id string) error {
	if err := d.awaitEngine(ctx, id); err != nil {
		return err
	}
	d.ran(id, 0)
	list, err := d.containers(ctx, id)
	if err != nil {
		return err
	}
	for _, c := range list {
		if err := d.remove(ctx, c); err != nil {
			return err
		}
	}
	if _, err := d.api.VolumeRemove(ctx, d.volumeName(id), client.VolumeRemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
		return d.wrap(err, "remove volume "+d.volumeName(id))
	}
	if err := d.removeDisk(id); err != nil {
		return err
	}
	return d.removeRunDirs(id, 0)
}

func (d *Driver) remove(ctx context.Context, c container.Summary) error {
	if stateOf(c.State) == driver.StatePaused {
		// a forced remove of a paused container kills it frozen, which
		// runsc's sandbox does not survive cleanly (a zombie the engine
		// cannot remove): thawed first
		if _, err := d.api.ContainerUnpause(ctx, c.ID, client.ContainerUnpauseOptions{}); err != nil && !cerrdefs.IsNotFound(err) {
			return d.wrap(err, "unpause container "+strings.Join(c.Names, ","))
		}
	}
	_, err := d.api.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true})
	if err != nil && !cerrdefs.IsNotFound(err) && !isRemovalInProgress(err) {
		return d.wrap(err, "remove container "+strings.Join(c.Names, ","))
	}
	return nil
}

func isRemovalInProgress(err error) bool {
	return cerrdefs.IsConflict(err) && strings.Contains(err.Error(), "already in progress")
}
