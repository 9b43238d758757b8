package docker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/driver/drivertest"
	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/testenv"
)

// corralBin is a freshly built corral, mounted into the test containers.
var corralBin string

func TestMain(m *testing.M) {
	testenv.MainWithCorral(m, &corralBin)
}

// stateDir is a driver's state directory for a test, the run directories
// of the sandboxes it leaves unmounted when it ends.
func stateDir(t *testing.T) string {
	dir := t.TempDir()
	testenv.UnmountUnder(t, dir)
	return dir
}

func newTestDriver(t *testing.T, label string, env ...string) *Driver {
	t.Helper()
	testenv.RequireDocker(t)
	d, err := New(driver.Config{Label: label, StateDir: stateDir(t)}, Options{Host: testenv.DockerHost(), PullPolicy: "never",
		Supervisor: testenv.SupervisorOf(corralBin), Env: env})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func TestConformance(t *testing.T) {
	testenv.RequireDocker(t)
	drivertest.RunWith(t, func(t *testing.T, label string) driver.Driver { return newTestDriver(t, label) },
		drivertest.Options{Image: testenv.TestImage, PullImage: pullableImage(t), InvalidImage: "Bad?Ref"})
}

// pullableImage is an image the driver's PullImage loads with no registry:
// an archive of an image no other test has (random filler bytes give it
// an id of its own, so its removal races no other test's use).
func pullableImage(t *testing.T) string {
	img, err := testenv.TestOCIImage(t.TempDir(), 1)
	if err != nil {
		t.Fatal(err)
	}
	return "docker-archive:" + img.DockerArchive
}

// startPolicySandbox runs a sandbox with a policy on the test image, and
// deletes it when the test ends.
func startPolicySandbox(t *testing.T, d *Driver, name, pol string) string {
	t.Helper()
	id := sandbox.NewID()
	t.Cleanup(func() {
		if err := d.Delete(context.Background(), id); err != nil {
			t.Errorf("cleanup: delete sandbox %s: %v", name, err)
		}
	})
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	spec := driver.Spec{ID: id, Name: name, Generation: 1, Image: testenv.TestImage, Command: []string{"sleep", "3600"}, Policy: drivertest.MustPolicy(t, pol)}
	if err := d.Create(c, spec); err != nil {
		t.Fatal(err)
	}
	if err := d.Start(c, driver.Ref{ID: id, Generation: 1}); err != nil {
		t.Fatal(err)
	}
	return id
}

func execIn(t *testing.T, d *Driver, id string, command ...string) (int, string, string) {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	code, err := d.Exec(c, id, driver.ExecOptions{Command: command, Stdout: &stdout, Stderr: &stderr})
	if err != nil {
		t.Fatalf("exec %v: %v", command, err)
	}
	return code, stdout.String(), stderr.String()
}

// The policy cases on Docker: the same policy, the same outcomes as on
// the native driver.
func TestPolicyCases(t *testing.T) {
	d := newTestDriver(t, "corral.test."+sandbox.ShortID(sandbox.NewID()))
	drivertest.RunPolicyCases(t, policySandbox(t, d, drivertest.Policy("/.corral/bin")))
}

// policySandbox runs a sandbox of pol for the policy cases, with an
// executable outside every list in the incarnation's run directory.
func policySandbox(t *testing.T, d *Driver, pol string) drivertest.PolicySandbox {
	t.Helper()
	id := startPolicySandbox(t, d, "policy", pol)
	data, err := os.ReadFile("/bin/busybox")
	if err == nil {
		err = os.WriteFile(filepath.Join(d.readyDir(id, 1), "busybox"), data, 0o755)
	}
	if err != nil {
		t.Fatal(err)
	}
	return drivertest.PolicySandbox{
		Exec: func(t *testing.T, command ...string) (int, string, string) {
			t.Helper()
			return execIn(t, d, id, command...)
		},
		Probe:   supervisorPath,
		Outside: runDir + "/busybox",
		Protections: func(t *testing.T) string {
			obj, err := d.Inspect(context.Background(), id)
			if err != nil {
				t.Fatal(err)
			}
			return obj.Protections
		},
	}
}

// On a kernel without Landlock (ABI 0, simulated), on Docker:
// best_effort runs and says so, hard_requirement refuses.
func TestLandlockUnavailable(t *testing.T) {
	d := newTestDriver(t, "corral.test."+sandbox.ShortID(sandbox.NewID()), simulatedLandlockEnv(0)...)
	lists := "filesystem_policy: {read_only: [/bin, /etc]}\n"
	id := startPolicySandbox(t, d, "best", "version: 1\n"+lists+"landlock: {compatibility: best_effort}\n")
	obj, err := d.Inspect(context.Background(), id)
	if err != nil || !strings.Contains(obj.Protections, "landlock unavailable") {
		t.Errorf("best_effort without Landlock: %+v, %v; want it running, saying Landlock is unavailable", obj, err)
	}
	hard := sandbox.NewID()
	t.Cleanup(func() { _ = d.Delete(context.Background(), hard) })
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	spec := driver.Spec{ID: hard, Name: "hard", Generation: 1, Image: testenv.TestImage, Command: []string{"sleep", "100"},
		Policy: drivertest.MustPolicy(t, "version: 1\n"+lists+"landlock: {compatibility: hard_requirement}\n")}
	if err := d.Create(c, spec); err != nil {
		t.Fatal(err)
	}
	err = d.Start(c, driver.Ref{ID: hard, Generation: 1})
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "hard_requirement") {
		t.Errorf("hard_requirement without Landlock: start = %v; want it refused, naming the requirement", err)
	}
}

// A main process that exits is reported by Watch (the engine's die
// event; Podman's event filter never matched it).
func TestWatchReportsExit(t *testing.T) {
	d := newTestDriver(t, "corral.test."+sandbox.ShortID(sandbox.NewID()))
	id := sandbox.NewID()
	t.Cleanup(func() { _ = d.Delete(context.Background(), id) })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	spec := driver.Spec{ID: id, Name: "exits", Generation: 1, Image: testenv.TestImage, Command: []string{"sh", "-c", "sleep 3; exit 3"},
		Policy: drivertest.MustPolicy(t, "version: 1\n")}
	if err := d.Create(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if err := d.Start(ctx, driver.Ref{ID: id, Generation: 1}); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{}, 1)
	go func() {
		_ = d.Watch(ctx, func(changed string) {
			if obj, err := d.Inspect(ctx, id); changed == id && err == nil && obj.State == driver.StateStopped {
				select {
				case exited <- struct{}{}:
				default:
				}
			}
		})
	}()
	select {
	case <-exited:
	case <-time.After(20 * time.Second):
		t.Fatal("Watch did not report the exit of the main process")
	}
}

// A workdir volume whose container is gone (a create cut short by a delete
// made it after the delete ran) is listed as a leftover, not while its
// container exists, and goes with Delete.
func TestLeftoverVolumes(t *testing.T) {
	d := newTestDriver(t, "corral.test.leftovers."+sandbox.NewID()[:8])
	ctx := context.Background()
	withContainer := startPolicySandbox(t, d, "kept", "version: 1\n")
	stray := sandbox.NewID()
	if _, err := d.api.VolumeCreate(ctx, client.VolumeCreateOptions{Name: d.volumeName(stray),
		Labels: map[string]string{d.cfg.Label: "true", driver.LabelSandboxID: stray}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.api.VolumeRemove(ctx, d.volumeName(stray), client.VolumeRemoveOptions{Force: true}) })
	leftovers := func() ([]driver.Object, error) {
		compute, err := d.List(ctx)
		if err != nil {
			return nil, err
		}
		return d.Leftovers(ctx, compute)
	}
	left, err := leftovers()
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 1 || left[0].ID != stray {
		t.Fatalf("leftovers %v; want only sandbox %s (not %s, whose container exists)", left, stray, withContainer)
	}
	if err := d.Delete(ctx, stray); err != nil {
		t.Fatal(err)
	}
	if left, err := leftovers(); err != nil || len(left) != 0 {
		t.Fatalf("after its delete: leftovers %v, %v; want none", left, err)
	}
	if _, err := d.api.VolumeInspect(ctx, d.volumeName(stray), client.VolumeInspectOptions{}); err == nil {
		t.Error("the leftover volume is still there after its delete")
	}
}

// A create cut off by its context (a delete preempting it, a shutdown) can
// still be carried out by the engine after the call returned: dockerd
// finishes a ContainerCreate whose client went away. The driver takes back
// what the engine makes, so that no container is left without a record
// until the orphan collection. The cut comes at every point of the call
// (after 0 to ~30 ms), and some cuts must land inside ContainerCreate.
func TestCancelledCreateLeavesNoContainer(t *testing.T) {
	d := newTestDriver(t, "corral.test.cancelled."+sandbox.NewID()[:8])
	ctx := context.Background()
	cut := 0
	for i := range 16 {
		id := sandbox.NewID()
		spec := driver.Spec{ID: id, Name: fmt.Sprintf("cut%d", i), Generation: 1, Image: testenv.TestImage,
			Command: []string{"sleep", "3600"}, Policy: drivertest.MustPolicy(t, "version: 1\n")}
		cctx, cancel := context.WithCancel(ctx)
		time.AfterFunc(time.Duration(i*2)*time.Millisecond, cancel)
		err := d.Create(cctx, spec)
		cancel()
		if err == nil {
			if err := d.Delete(ctx, id); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if cctx.Err() == nil {
			t.Fatalf("create %d failed without being cut off: %v", i, err)
		}
		cut++
		time.Sleep(300 * time.Millisecond) // time for the engine to finish what it was asked
		list, err := d.containers(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if len(list) > 0 {
			t.Errorf("create %d, cut off after %d ms: the engine made container %s after the call returned, and it stays", i, i*2, list[0].Names[0])
		}
		if err := d.Delete(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if cut == 0 {
		t.Fatal("no create was cut off: the test proves nothing")
	}
}

// A delete that preempts a create waits for the engine's answer to it:
// the engine carries out a ContainerCreate whose client went away, and
// under load it answers seconds later, after a delete that did not wait
// had listed nothing and finished, which left a container (and its
// volume, made again by the create) with no record. The relay holds the
// create well past the moment the caller goes and then carries it out,
// as the engine does.
func TestDeleteWaitsForACutCreate(t *testing.T) {
	testenv.RequireDocker(t)
	relay := testenv.NewRelay(t, testenv.DockerSocket())
	d, err := New(driver.Config{Label: "corral.test.cutcreate." + sandbox.NewID()[:8], StateDir: stateDir(t)},
		Options{Host: "unix://" + relay.Path, PullPolicy: "never", Supervisor: testenv.SupervisorOf(corralBin)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	id := sandbox.NewID()
	spec := driver.Spec{ID: id, Name: "cut", Generation: 1, Image: testenv.TestImage,
		Command: []string{"sleep", "3600"}, Policy: drivertest.MustPolicy(t, "version: 1\n")}
	relay.HoldAndCarryOut(`^POST .*/containers/create$`)
	cctx, cut := context.WithCancel(context.Background())
	created := make(chan error, 1)
	go func() { created <- d.Create(cctx, spec) }()
	wait, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := relay.Held(wait); err != nil {
		t.Fatal(err)
	}
	cut()
	if err := <-created; err == nil {
		t.Fatal("a create cut off while the engine held it succeeded")
	}
	deleted := make(chan error, 1)
	go func() { deleted <- d.Delete(wait, id) }()
	select {
	case err := <-deleted:
		t.Errorf("the delete ended (%v) before the engine answered the create it preempted", err)
		deleted <- err
	case <-time.After(3 * time.Second):
	}
	relay.Release()
	relay.CarriedOut()
	if err := <-deleted; err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Delete(context.Background(), id) })
	if list, err := d.containers(wait, id); err != nil || len(list) > 0 {
		t.Errorf("containers left after the delete: %v, %v", list, err)
	}
	if _, err := d.api.VolumeInspect(wait, d.volumeName(id), client.VolumeInspectOptions{}); err == nil {
		t.Error("the workdir volume is left after the delete")
	}
}
