package drivertest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/policy"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/testenv"
)

// The capabilities through which the lifecycle reaches past the driver
// interface: ports, egress, images, workdirs, leftover storage and tiers.

// echoPort is where the DialPort case's sandbox serves an echo.
const echoPort = 7070

func (s *suite) testDialPort(t *testing.T) {
	d := s.driver(t)
	pd := capability[driver.PortDialer](t, d, "cannot reach into a sandbox's network")
	spec := d.spec(1)
	spec.Command = []string{"/bin/busybox", "nc", "-ll", "-p", strconv.Itoa(echoPort), "-e", "/bin/cat"}
	d.running(spec)
	ref := driver.Ref{ID: spec.ID, Generation: 1}
	testenv.Eventually(t, CallTimeout, func() error {
		c, err := pd.DialPort(ctx(t), ref, echoPort)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write([]byte("through the driver\n")); err != nil {
			return err
		}
		line, err := bufio.NewReader(c).ReadString('\n')
		if line != "through the driver\n" {
			return fmt.Errorf("the echo in the sandbox answered %q, %v", line, err)
		}
		return nil
	})
	if c, err := pd.DialPort(ctx(t), ref, echoPort+1); err == nil || !errors.Is(err, syscall.ECONNREFUSED) {
		closeIf(c)
		t.Errorf("DialPort of a port nothing listens on: %v; want an error wrapping ECONNREFUSED", err)
	}
	if c, err := pd.DialPort(ctx(t), driver.Ref{ID: spec.ID, Generation: 2}, echoPort); !errors.Is(err, errdefs.ErrNotFound) {
		closeIf(c)
		t.Errorf("DialPort of a generation that does not run: %v; want not found", err)
	}
	d.stop(spec.ID, 1)
	if c, err := pd.DialPort(ctx(t), ref, echoPort); !errors.Is(err, errdefs.ErrNotFound) {
		closeIf(c)
		t.Errorf("DialPort of a stopped incarnation: %v; want not found", err)
	}
}

func closeIf(c interface{ Close() error }) {
	if c != nil {
		c.Close()
	}
}

func (s *suite) testAttachEgress(t *testing.T) {
	d := s.driver(t)
	ea := capability[driver.EgressAttacher](t, d, "cannot serve egress to a running sandbox")
	spec := d.running(d.spec(1))
	if err := ea.AttachEgress(ctx(t), driver.Ref{ID: spec.ID, Generation: 1}); err != nil {
		t.Errorf("AttachEgress of a running incarnation: %v", err)
	}
	if err := ea.AttachEgress(ctx(t), driver.Ref{ID: spec.ID, Generation: 2}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("AttachEgress of a generation that does not run: %v; want not found", err)
	}
	d.stop(spec.ID, 1)
	if err := ea.AttachEgress(ctx(t), driver.Ref{ID: spec.ID, Generation: 1}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("AttachEgress of a stopped incarnation: %v; want not found", err)
	}
}

func (s *suite) testImages(t *testing.T) {
	d := s.driver(t)
	im := capability[driver.Imager](t, d, "keeps no images")
	ref := s.opts.PullImage
	if li, ok := im.(driver.LocalImager); ok && li.LocalImage(ref) {
		t.Skipf("the suite's image %q is used where it is, never pulled", ref)
	}
	info, err := im.PullImage(ctx(t), ref, nil)
	if err != nil {
		t.Fatalf("PullImage %q: %v", ref, err)
	}
	if len(info.ID) != len("sha256:")+64 || info.ID[:7] != "sha256:" {
		t.Errorf("PullImage %q: id %q; want sha256:<64 hex digits>", ref, info.ID)
	}
	listed := func() bool {
		list, err := im.ListImages(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(list, func(i driver.ImageInfo) bool { return i.ID == info.ID })
	}
	if !listed() {
		t.Errorf("ListImages after a pull of %s does not list it", info.ID)
	}
	spec := d.spec(1)
	spec.Image = ref
	d.running(spec)
	if _, err := im.RemoveImage(ctx(t), ref); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("RemoveImage of the image a sandbox runs: %v; want failed precondition", err)
	}
	d.delete(spec.ID)
	if removed, err := im.RemoveImage(ctx(t), ref); err != nil || removed.ID != info.ID {
		t.Errorf("RemoveImage of the image once its sandbox is deleted: %v, %v; want %s removed", removed.ID, err, info.ID)
	}
	if listed() {
		t.Errorf("ListImages after the removal of %s still lists it", info.ID)
	}
	if _, err := im.RemoveImage(ctx(t), "corral-test/no-such-image:1"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("RemoveImage of an image that is not there: %v; want not found", err)
	}
}

func (s *suite) testWorkdir(t *testing.T) {
	d := s.driver(t)
	wd := capability[driver.Workdirs](t, d, "has no workdirs on the gateway's host")
	spec := d.spec(1)
	d.create(spec)
	dir, err := wd.Workdir(ctx(t), spec.ID)
	if errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Skipf("the suite's sandbox has no workdir reachable while stopped: %v", err)
	}
	if err != nil {
		t.Fatalf("Workdir of a created sandbox: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "from-the-host"), []byte("written while stopped\n"), 0o644); err != nil {
		t.Fatalf("write into the workdir %s: %v", dir, err)
	}
	if ex, ok := d.Driver.(driver.Execer); ok {
		d.start(spec.ID, 1)
		var out, errOut bytes.Buffer
		code, err := ex.Exec(ctx(t), spec.ID, driver.ExecOptions{Command: []string{"cat", "/sandbox/from-the-host"}, Stdout: &out, Stderr: &errOut})
		if err != nil || code != 0 || out.String() != "written while stopped\n" {
			t.Errorf("cat /sandbox/from-the-host in the sandbox: %d, %q, %q, %v; want what the host wrote in its workdir", code, out.String(), errOut.String(), err)
		}
	}
	if _, err := wd.Workdir(ctx(t), sandbox.NewID()); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Workdir of a sandbox that does not exist: %v; want not found", err)
	}
}

func (s *suite) testLeftovers(t *testing.T) {
	d := s.driver(t)
	lo := capability[driver.Leftovers](t, d, "keeps no storage apart from compute")
	spec := d.spec(1)
	d.create(spec)
	listed := func(objs []driver.Object) bool {
		return slices.ContainsFunc(objs, func(o driver.Object) bool { return o.ID == spec.ID })
	}
	compute, err := d.Driver.List(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if objs, err := lo.Leftovers(ctx(t), compute); err != nil || listed(objs) {
		t.Errorf("Leftovers given the object of %s: %v, %v; want it not listed", spec.ID, objs, err)
	}
	// Given a listing without its object (one made before the create),
	// the sandbox's storage is a leftover if it has any; the delete removes
	// whatever it is.
	objs, err := lo.Leftovers(ctx(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	hadStorage := listed(objs)
	d.delete(spec.ID)
	if objs, err := lo.Leftovers(ctx(t), nil); err != nil || listed(objs) {
		t.Errorf("Leftovers after the delete of %s (its storage listed before: %v): %v, %v; want it gone", spec.ID, hadStorage, objs, err)
	}
}

func (s *suite) testTiers(t *testing.T) {
	d := s.driver(t)
	tr := capability[driver.Tierer](t, d, "runs only the namespaces tier")
	tiers := tr.Tiers(ctx(t))
	seen := map[string]bool{}
	for _, tier := range tiers {
		if _, err := policy.Parse("version: 1\nisolation: " + tier.Name + "\n"); err != nil {
			t.Errorf("tier %q is no policy's isolation: %v", tier.Name, err)
		}
		if seen[tier.Name] {
			t.Errorf("tier %q listed twice: %v", tier.Name, tiers)
		}
		seen[tier.Name] = true
		if tier.Detail == "" {
			t.Errorf("tier %q has no detail: what runs it, or why it cannot", tier.Name)
		}
	}
	isolation := s.policy().Isolation
	if isolation == "" {
		isolation = policy.IsolationNamespaces
	}
	i := slices.IndexFunc(tiers, func(t driver.Tier) bool { return t.Name == isolation })
	if i < 0 || !tiers[i].Available {
		t.Errorf("Tiers: %v; want the tier the suite runs on (%s) available", tiers, isolation)
	}
}
