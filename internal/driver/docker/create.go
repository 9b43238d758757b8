package docker

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"github.com/corral-sandbox/corral/internal/control"
	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/policy"
	"github.com/corral-sandbox/corral/internal/supervisor"
)

// Create implements driver.Driver.
func (d *Driver) Create(ctx context.Context, spec driver.Spec) error {
	if err := d.awaitEngine(ctx, spec.ID); err != nil {
		return err
	}
	list, err := d.containers(ctx, spec.ID)
	if err != nil {
		return err
	}
	for _, c := range list {
		switch {
		case generation(c.Labels) == spec.Generation:
			return nil // adopt
		case running(c.State):
			return errdefs.FailedPrecondition("container %s of sandbox %s still runs generation %d", c.Names[0], spec.ID, generation(c.Labels))
		}
		if err := d.remove(ctx, c); err != nil { // a stopped, older incarnation
			return err
		}
	}
	if err := d.removeRunDirs(spec.ID, spec.Generation); err != nil { // older incarnations'
		return err
	}
	img, err := d.prepareImage(ctx, spec)
	if err != nil {
		return err
	}
	pol, env := imageUser(spec.Policy, img.user)
	dir := d.readyDir(spec.ID, spec.Generation)
	if err := d.makeRunDir(dir); err != nil {
		return err
	}
	if !slices.ContainsFunc(img.env, func(kv string) bool { return strings.HasPrefix(kv, "HOME=") }) {
		env = append(env, "HOME="+workdir) // the root is read-only
	}
	env = append(env, supervisor.PolicyEnv+"="+supervisor.PolicyJSON(pol))
	env = append(env, d.opts.Env...)
	work, err := d.workdirMount(ctx, spec, pol)
	if err != nil {
		return err
	}
	l := pol.Limits
	labels := d.cfg.ObjectLabels(spec)
	hc := &container.HostConfig{
		Resources: container.Resources{Memory: l.MemoryBytes, MemorySwap: l.MemoryBytes,
			NanoCPUs: l.CPUMillis * 1e6, PidsLimit: ptr(l.PidsMax())},
		NetworkMode:   "none",
		RestartPolicy: container.RestartPolicy{Name: container.RestartPolicyDisabled}, // the gateway owns restarts
		Mounts: []mount.Mount{
			{Type: mount.TypeBind, Source: d.opts.Supervisor, Target: supervisorPath, ReadOnly: true},
			{Type: mount.TypeBind, Source: dir, Target: runDir},
			work,
		},
	}
	egress := d.cfg.Egress != nil
	ctlSocket := controlSocket // the way in for execs: a socket the host can reach
	if pol.GVisor() {
		ctlSocket = "" // gVisor's sockets are its own kernel's
		g, err := d.gvisorRuntime(ctx)
		if err != nil {
			return err
		}
		hc.Runtime = g.name
		hc.PidsLimit = ptr(gvisorHostPids(l.PidsMax()))
		labels[labelIsolation] = policy.IsolationGVisor
		egress = egress && g.hostNetwork // else nothing inside could reach it
	}
	if egress {
		trust, err := d.cfg.Egress.Prepare(spec.ID)
		if err != nil {
			return fmt.Errorf("docker create: egress: %w", err)
		}
		egressEnv, err := d.cfg.Egress.Env(driver.Ref{ID: spec.ID, Generation: spec.Generation}, pol.Credentials)
		if err != nil {
			return fmt.Errorf("docker create: egress: %w", err)
		}
		env = append(env, egressEnv...)
		hc.Mounts = append(hc.Mounts,
			mount.Mount{Type: mount.TypeBind, Source: trust, Target: driver.TrustDir, ReadOnly: true},
			mount.Mount{Type: mount.TypeBind, Source: filepath.Join(trust, driver.BundleFile), Target: driver.SystemBundle, ReadOnly: true})
	}
	d.harden(hc, pol)
	name := containerName(spec.Name, spec.ID)
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("docker create: %w", err) // nothing asked yet: nothing to take back
	}
	err = d.createContainer(ctx, spec.ID, client.ContainerCreateOptions{
		Name: name,
		Config: &container.Config{
			Image:      img.name,
			Hostname:   spec.Name,
			Labels:     labels,
			Env:        env,
			Entrypoint: supervisor.MainArgv(supervisorPath, readyFile, ctlSocket),
			Cmd:        img.command,
			WorkingDir: cmp.Or(img.workingDir, workdir),
			// The supervisor is root, whatever user the image names: the
			// exec stage switches to the sandbox's (imageUser).
			User: "0:0",
		},
		HostConfig: hc,
	})
	if cerrdefs.IsConflict(err) {
		// A create whose reply was lost already made it: adopt it if it is ours.
		if list, lerr := d.containers(ctx, spec.ID); lerr == nil && len(list) > 0 && generation(list[0].Labels) == spec.Generation {
			return nil
		}
	}
	return d.wrap(err, "create container for sandbox "+spec.Name)
}

// engineAnswerWait bounds how long the driver waits for the engine's
// answer to a ContainerCreate whose caller went away.
const engineAnswerWait = 5 * time.Minute

// engineCreate is a ContainerCreate the engine is carrying out.
type engineCreate struct {
	answered  chan struct{} // closed once answered (and taken back if abandoned)
	done      bool          // the engine has answered: err is its answer
	err       error
	abandoned bool // its caller went away first
}

// createContainer asks the engine for a container and returns its answer,
// or ctx's error if ctx ends first. The engine carries out a create whose
// client went away (dockerd does), at its own pace: under load, seconds
// after the call returned, and after the delete that preempted it had
// listed the sandbox's containers. So the request itself is never cut: it
// goes on without ctx until the engine answers (engineAnswerWait at
// most), a container made for a caller that went away is removed then
// (it holds nothing yet: the workdir is the volume's), and the next
// Create or Delete of the sandbox waits for all that first (awaitEngine).
func (d *Driver) createContainer(ctx context.Context, id string, opts client.ContainerCreateOptions) error {
	c := &engineCreate{answered: make(chan struct{})}
	d.mu.Lock()
	d.creates[id] = c
	d.mu.Unlock()
	go d.carryOut(context.WithoutCancel(ctx), id, c, opts)
	select {
	case <-c.answered:
		return c.err
	case <-ctx.Done():
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if c.done {
		return c.err
	}
	c.abandoned = true
	return ctx.Err()
}

// carryOut makes the engine call of createContainer.
func (d *Driver) carryOut(ctx context.Context, id string, c *engineCreate, opts client.ContainerCreateOptions) {
	ctx, cancel := context.WithTimeout(ctx, engineAnswerWait)
	defer cancel()
	res, err := d.api.ContainerCreate(ctx, opts)
	d.mu.Lock()
	c.done, c.err = true, err
	takeBack := c.abandoned && err == nil
	d.mu.Unlock()
	if takeBack {
		_, _ = d.api.ContainerRemove(ctx, res.ID, client.ContainerRemoveOptions{Force: true})
	}
	d.mu.Lock()
	if d.creates[id] == c {
		delete(d.creates, id)
	}
	d.mu.Unlock()
	close(c.answered)
}

// awaitEngine waits until the engine has answered every create of the
// sandbox whose caller went away (createContainer), so that what it made
// is listed, adopted or taken back before anything else is decided.
func (d *Driver) awaitEngine(ctx context.Context, id string) error {
	d.mu.Lock()
	c := d.creates[id]
	d.mu.Unlock()
	if c == nil {
		return nil
	}
	select {
	case <-c.answered:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("docker: the engine has not yet answered an earlier create of sandbox %s: %w", id, ctx.Err())
	}
}

// preparedImage is what a container takes from its image.
type preparedImage struct {
	name       string   // the engine's name of the image
	command    []string // the spec's, else the image's entrypoint and command
	env        []string // the image's environment
	workingDir string   // the image's working directory, if it names one
	user       string   // the image's user, if it names one
}

// prepareImage applies the pull policy (a file image is loaded when the
// engine lacks it, whatever the policy: see loadLocal) and returns what
// the container takes from the image.
func (d *Driver) prepareImage(ctx context.Context, spec driver.Spec) (preparedImage, error) {
	if err := d.Validate(spec); err != nil {
		return preparedImage{}, err // a record made before Validate refused such images
	}
	p := preparedImage{name: spec.Image, command: spec.Command}
	if _, _, ok := localSource(p.name); ok {
		tag, err := d.loadLocal(ctx, p.name, nil)
		if err != nil {
			return p, err
		}
		p.name = tag
	} else if d.opts.PullPolicy == "always" {
		if err := d.pull(ctx, p.name, nil); err != nil {
			return p, err
		}
	}
	img, err := d.api.ImageInspect(ctx, p.name)
	if cerrdefs.IsNotFound(err) {
		if d.opts.PullPolicy == "never" {
			return p, errdefs.InvalidArgument("image %q is not on the engine and image_pull_policy is never", spec.Image)
		}
		if err := d.pull(ctx, p.name, nil); err != nil {
			return p, err
		}
		img, err = d.api.ImageInspect(ctx, p.name)
	}
	if err != nil {
		return p, d.wrap(err, fmt.Sprintf("inspect image %q", spec.Image))
	}
	if c := img.Config; c != nil {
		p.env, p.workingDir, p.user = c.Env, c.WorkingDir, c.User
		if len(p.command) == 0 {
			p.command = append(append(p.command, c.Entrypoint...), c.Cmd...)
		}
	}
	if len(p.command) == 0 {
		return p, errdefs.InvalidArgument("image %q has no command: give one after --", spec.Image)
	}
	return p, nil
}

// imageUser gives a policy that names no run_as_user the image's user, as
// the native driver does: a uid at once; a name through the exec stage,
// which looks it up in the image's /etc/passwd (supervisor.ImageUserEnv);
// root, or no user, is policy.DefaultUser. It returns the policy and the
// container environment it needs.
func imageUser(pol policy.Policy, user string) (policy.Policy, []string) {
	if pol.Process.RunAsUser != nil || user == "" {
		return pol.WithDefaultUser(), nil
	}
	if uid, err := supervisor.ResolveUser(user, nil); err == nil {
		pol.Process.RunAsUser = &uid
		return pol, nil
	}
	return pol, []string{supervisor.ImageUserEnv + "=" + user}
}

// Start implements driver.Driver. It returns once the supervisor reports
// that the main process runs.
func (d *Driver) Start(ctx context.Context, ref driver.Ref) error {
	list, err := d.containers(ctx, ref.ID)
	if err != nil {
		return err
	}
	if len(list) == 0 {
		return errdefs.NotFound("no container for sandbox %s", ref.ID)
	}
	c := list[0]
	if g := generation(c.Labels); g != ref.Generation {
		return errdefs.FailedPrecondition("container %s is generation %d, not %d", c.Names[0], g, ref.Generation)
	}
	dir := d.readyDir(ref.ID, ref.Generation)
	switch stateOf(c.State) {
	case driver.StateRunning, driver.StatePaused:
		d.ran(ref.ID, ref.Generation)
		return d.attachEgress(ctx, ref, c.ID) // a start whose answer was lost may not have
	case driver.StateStopped: // a restart of the same incarnation
		if err := d.makeRunDir(dir); err != nil {
			return err
		}
	}
	if err := d.remountDisk(ref.ID); err != nil {
		return err
	}
	if _, err := d.api.ContainerStart(ctx, c.ID, client.ContainerStartOptions{}); err != nil {
		return d.wrap(err, "start container "+c.Names[0])
	}
	if err := d.attachEgress(ctx, ref, c.ID); err != nil {
		return err
	}
	if err := d.waitReady(ctx, c.ID, dir); err != nil {
		return err
	}
	d.ran(ref.ID, ref.Generation)
	return nil
}

// attachEgress serves the egress proxy in the network namespace of a
// running container, when the gateway has one.
func (d *Driver) attachEgress(ctx context.Context, ref driver.Ref, containerID string) error {
	if d.cfg.Egress == nil {
		return nil
	}
	netns, err := d.containerNetNS(ctx, containerID)
	if err != nil {
		return err
	}
	return d.cfg.Egress.Attach(ctx, ref, netns)
}

// netNS is the network namespace of incarnation ref's container;
// errdefs.ErrNotFound when it does not run.
func (d *Driver) netNS(ctx context.Context, ref driver.Ref) (string, error) {
	list, err := d.containers(ctx, ref.ID)
	if err != nil {
		return "", err
	}
	if len(list) == 0 || generation(list[0].Labels) != ref.Generation {
		return "", errdefs.NotFound("no container of sandbox %s at generation %d", ref.ID, ref.Generation)
	}
	return d.containerNetNS(ctx, list[0].ID)
}

// containerNetNS is the network namespace of a running container, seen
// from the gateway, which must share the engine's host.
func (d *Driver) containerNetNS(ctx context.Context, containerID string) (string, error) {
	res, err := d.api.ContainerInspect(ctx, containerID, client.ContainerInspectOptions{})
	if err != nil {
		return "", d.wrap(err, "inspect container")
	}
	st := res.Container.State
	if st == nil || !st.Running || st.Pid <= 0 {
		return "", errdefs.NotFound("container %s does not run", containerID)
	}
	path := fmt.Sprintf("/proc/%d/ns/net", st.Pid)
	if _, err := os.Stat(path); err != nil {
		return "", errdefs.FailedPrecondition("the network namespace of container %s (pid %d) is not visible to the gateway: egress and ports need the Docker engine on the gateway's own host: %v", containerID, st.Pid, err)
	}
	return path, nil
}

// ready tells whether the supervisor reported readiness in dir (a regular
// file, never a symlink or a FIFO a workload put there).
func ready(dir string) bool {
	_, err := supervisor.ReadReport(dir, readyName)
	return err == nil
}

// waitReady waits for the supervisor's ready file in dir, checking now and
// then that the container has not exited instead.
func (d *Driver) waitReady(ctx context.Context, containerID, dir string) error {
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for i := 0; ; i++ {
		if ready(dir) {
			return nil
		}
		if i%100 == 99 {
			res, err := d.api.ContainerInspect(ctx, containerID, client.ContainerInspectOptions{})
			if err != nil {
				return d.wrap(err, "inspect container")
			}
			if st := res.Container.State; st != nil && !st.Running {
				if ready(dir) {
					return nil // it ran, and is done already
				}
				if why, err := supervisor.ReadReport(dir, supervisor.FailedFile); err == nil {
					return errdefs.InvalidArgument("the sandbox's command cannot run: %s", control.Printable(string(why)))
				}
				return fmt.Errorf("the container exited (code %d) before its main process started: %s", st.ExitCode, d.tail(ctx, containerID))
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the main process to start: %w", ctx.Err())
		case <-tick.C:
		}
	}
}

func ptr[T any](v T) *T { return &v }
