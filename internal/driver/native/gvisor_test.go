package native

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/driver/drivertest"
	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/policy"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/supervisor"
	"github.com/corral-sandbox/corral/internal/testenv"
)

// gvisorPolicy asks for the gVisor tier.
const gvisorPolicy = "version: 1\nisolation: gvisor\n"

func TestGVisorConformance(t *testing.T) {
	testenv.RequireRunsc(t)
	drivertest.RunWith(t, func(t *testing.T, label string) driver.Driver { return newTestDriver(t, label) },
		drivertest.Options{Image: HostImage, InvalidImage: "relative/root", Isolation: policy.IsolationGVisor})
}

// TestGVisorKernel: a sandbox of the gVisor tier runs on gVisor's kernel,
// and a system call the host's kernel has but gVisor's lacks fails with
// ENOSYS while the sandbox runs on.
func TestGVisorKernel(t *testing.T) {
	testenv.RequireRunsc(t)
	d := newTestDriver(t, "corral.test")
	probes := visibleDir(t, corral, "corral")
	// Unconfined: the default seccomp filter refuses syslog(2), which
	// dmesg reads.
	s := startSandboxOf(t, d, "/", "gvisor", gvisorPolicy+"process: {seccomp: unconfined}\n")
	if out := s.mustExec("dmesg"); !strings.Contains(out, "Starting gVisor") {
		t.Errorf("dmesg in a gVisor sandbox: %q, want gVisor's kernel", out)
	}
	if host, _ := supervisor.Probe([]string{"landlock"}); len(host) != 1 || strings.Contains(host[0], "ENOSYS") {
		t.Fatalf("the host's kernel: %q; the test needs one with Landlock", host)
	}
	if out := s.mustExec(probes+"/corral", "supervise", "probe", "landlock"); strings.TrimSpace(out) != "landlock: ENOSYS" {
		t.Errorf("landlock_create_ruleset in a gVisor sandbox: %q, want ENOSYS", out)
	}
	s.mustExec("true") // it still runs
	obj, err := d.Inspect(ctx(t), s.id)
	if err != nil || obj.State != driver.StateRunning || !strings.Contains(obj.Protections, "gVisor") {
		t.Errorf("after the missing system call: %+v, %v; want it running, its protections naming gVisor", obj, err)
	}
	if err := d.Stop(ctx(t), driver.Ref{ID: s.id, Generation: 1}, driver.StopOptions{Timeout: 5 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if obj, err := d.Inspect(ctx(t), s.id); err != nil || obj.State != driver.StateStopped {
		t.Errorf("after a stop: %+v, %v; want stopped", obj, err)
	}
}

// TestGVisorRefusals: what the gVisor tier cannot do is refused at create,
// saying why: Landlock as a hard requirement, and any gVisor sandbox where
// the host has no runsc.
func TestGVisorRefusals(t *testing.T) {
	testenv.RequireRoot(t)
	d := newDriverWith(t, "corral.test", Options{Supervisor: corral, Runsc: "/does/not/exist/runsc"})
	for _, tc := range []struct{ runsc, policy, want string }{
		{"/does/not/exist/runsc", gvisorPolicy, "runsc"},
		{"runsc", gvisorPolicy + "filesystem_policy: {read_only: [/usr]}\nlandlock: {compatibility: hard_requirement}\n", "hard_requirement"},
	} {
		d.opts.Runsc = tc.runsc
		if tc.runsc == "runsc" {
			testenv.RequireRunsc(t)
		}
		spec := driver.Spec{ID: sandbox.NewID(), Name: "refused", Generation: 1, Image: HostImage, Command: []string{"true"},
			Policy: drivertest.MustPolicy(t, tc.policy)}
		if err := d.Validate(spec); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(%q) with runsc %s = %v; want an invalid argument naming %q", tc.policy, tc.runsc, err, tc.want)
		}
		if err := d.Create(context.Background(), spec); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Create(%q) with runsc %s = %v; want it refused", tc.policy, tc.runsc, err)
		}
	}
}
