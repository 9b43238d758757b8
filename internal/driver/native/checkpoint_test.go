package native

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/internal/cgroups"
	"github.com/corral-sandbox/corral/internal/control"
	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/driver/drivertest"
	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/testenv"
)

// checkpointPolicy is a gVisor sandbox that can be checkpointed.
const checkpointPolicy = gvisorPolicy + "lifecycle: {memory_snapshots: true}\n"

// memoryServer keeps its state only in memory.
var memoryServer = []string{"/usr/bin/python3", "-c", testenv.MemoryServer}

// ask asks the memory server of s for its value and counter.
func ask(t *testing.T, s *testSandbox) (string, int) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		code, out, _ := s.exec(testenv.AskMemoryServer...)
		var secret string
		var n int
		if f := strings.Fields(out); code == 0 && len(f) == 2 {
			secret = f[0]
			if _, err := fmt.Sscan(f[1], &n); err == nil {
				return secret, n
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the memory server of %s does not answer: exit %d, %q", s.id, code, out)
		}
	}
}

// TestGVisorMemoryCheckpoint: a checkpoint of a sandbox of the gVisor tier
// holds its processes' memory; the sandbox goes on after it from where it
// was, and a new sandbox started from the image answers with the same
// state.
func TestGVisorMemoryCheckpoint(t *testing.T) {
	testenv.RequireRunsc(t)
	testenv.RequireHostPython(t)
	d := newTestDriver(t, "corral.test")
	src := startSandbox(t, d, "memory", checkpointPolicy, memoryServer...)
	secret, n1 := ask(t, src)

	begun := time.Now()
	imagePath, resume, err := d.Checkpoint(ctx(t), driver.Ref{ID: src.id, Generation: 1})
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(begun)
	fi, err := os.Stat(imagePath)
	if err != nil {
		t.Fatal(err)
	}
	kept := filepath.Join(t.TempDir(), driver.MemoryImage)
	if err := os.Link(imagePath, kept); err != nil {
		t.Fatal(err)
	}
	if err := resume(); err != nil {
		t.Fatal(err)
	}
	t.Logf("checkpoint: %v, image %d bytes", took, fi.Size())
	if got, n2 := ask(t, src); got != secret || n2 < n1 {
		t.Errorf("after its checkpoint the sandbox tells %q %d; want %q from %d on", got, n2, secret, n1)
	}

	// A caller that goes away while the processes are held (a gateway
	// killed during the copy) lets them go on, from where they were.
	c, err := control.Dial(d.socket(src.id, 1))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Send(control.Request{Op: control.OpCheckpoint}); err != nil {
		t.Fatal(err)
	}
	if r, err := c.Recv(); err != nil || r.State != control.StateCheckpointed {
		t.Fatalf("checkpoint: %+v, %v", r, err)
	}
	c.Close()
	if got, n4 := ask(t, src); got != secret || n4 < n1 {
		t.Errorf("after its caller went away during a checkpoint the sandbox tells %q %d; want %q from %d on", got, n4, secret, n1)
	}

	dst := &testSandbox{t: t, d: d, id: sandbox.NewID(), gen: 1}
	t.Cleanup(func() { _ = d.Delete(ctx(t), dst.id) })
	ref := driver.Ref{ID: dst.id, Generation: 1}
	spec := driver.Spec{ID: dst.id, Name: "restored", Generation: 1, Image: HostImage, Command: memoryServer, Policy: drivertest.MustPolicy(t, checkpointPolicy)}
	if err := d.Create(ctx(t), spec); err != nil {
		t.Fatal(err)
	}
	image, err := os.Open(kept)
	if err != nil {
		t.Fatal(err)
	}
	defer image.Close()
	if err := d.SeedMemory(ctx(t), ref, image); err != nil {
		t.Fatal(err)
	}
	begun = time.Now()
	if err := d.Start(ctx(t), ref); err != nil {
		t.Fatal(err)
	}
	t.Logf("start from the image: %v", time.Since(begun))
	if got, n3 := ask(t, dst); got != secret || n3 < n1 {
		t.Errorf("the sandbox restored from the image tells %q %d; want %q from %d on", got, n3, secret, n1)
	}
	if obj, err := d.Inspect(ctx(t), dst.id); err != nil || !strings.Contains(obj.Protections, "restored from a memory checkpoint") {
		t.Errorf("the restored sandbox: %+v, %v; want its protections to say it was restored", obj, err)
	}
	// A stop and a new start boot afresh: the image was the first start's.
	if err := d.Stop(ctx(t), ref, driver.StopOptions{Timeout: 5 * time.Second}); err != nil {
		t.Fatal(err)
	}

	plain := startSandbox(t, d, "plain", gvisorPolicy)
	if _, _, err := d.Checkpoint(ctx(t), driver.Ref{ID: plain.id, Generation: 1}); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "memory_snapshots") {
		t.Errorf("a checkpoint of a gVisor sandbox on the host's network: %v; want FailedPrecondition naming lifecycle.memory_snapshots", err)
	}
	host := startSandbox(t, d, "namespaces", "version: 1\n")
	if _, _, err := d.Checkpoint(ctx(t), driver.Ref{ID: host.id, Generation: 1}); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "CRIU") {
		t.Errorf("a checkpoint of a sandbox of the namespaces tier: %v; want FailedPrecondition saying why", err)
	}
}

// workloadProcs lists the host pids in a sandbox's workload cgroup and
// the resident memory they hold.
func workloadProcs(t *testing.T, id string) ([]int, int64) {
	t.Helper()
	dir := filepath.Join(cgroups.Root, workload(id))
	if !cgroups.Unified() {
		dir = filepath.Join(cgroups.Root, "pids", workload(id))
	}
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		t.Fatal(err)
	}
	var (
		pids []int
		rss  int64
	)
	for _, f := range strings.Fields(string(data)) {
		var pid int
		if _, err := fmt.Sscan(f, &pid); err != nil {
			t.Fatalf("cgroup.procs: %q", data)
		}
		pids = append(pids, pid)
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		for _, line := range strings.Split(string(status), "\n") {
			var kb int64
			if _, serr := fmt.Sscanf(line, "VmRSS: %d kB", &kb); err == nil && serr == nil {
				rss += kb << 10
			}
		}
	}
	return pids, rss
}

// TestGVisorPauseMemory: a pause with memory checkpoints a gVisor sandbox
// out: it is paused with no process left on the host, refuses an exec,
// and its resume restores it with its memory; a stop of one paused so
// ends it as stopped.
func TestGVisorPauseMemory(t *testing.T) {
	testenv.RequireRunsc(t)
	testenv.RequireHostPython(t)
	d := newTestDriver(t, "corral.test")
	s := startSandbox(t, d, "pause-memory", checkpointPolicy, memoryServer...)
	ref := driver.Ref{ID: s.id, Generation: 1}
	secret, n1 := ask(t, s)
	running, rss := workloadProcs(t, s.id)
	if len(running) == 0 {
		t.Fatal("the running sandbox has no process in its workload cgroup: the test could not see them go")
	}

	begun := time.Now()
	if err := d.PauseMemory(ctx(t), ref); err != nil {
		t.Fatal(err)
	}
	paused := time.Since(begun)
	if obj, err := d.Inspect(ctx(t), s.id); err != nil || obj.State != driver.StatePaused {
		t.Fatalf("after a pause with memory: %+v, %v; want paused", obj, err)
	}
	if left, leftRSS := workloadProcs(t, s.id); len(left) != 0 {
		t.Errorf("paused with its memory out, the sandbox still has processes %v (%d bytes resident)", left, leftRSS)
	}
	if err := d.PauseMemory(ctx(t), ref); err != nil {
		t.Errorf("a second pause with memory: %v; want none", err)
	}
	if _, err := d.Exec(ctx(t), s.id, driver.ExecOptions{Command: []string{"true"}}); err == nil || !strings.Contains(err.Error(), "checkpointed") {
		t.Errorf("an exec in a sandbox paused with its memory out: %v; want a refusal saying it is checkpointed", err)
	}

	begun = time.Now()
	if err := d.Resume(ctx(t), ref); err != nil {
		t.Fatal(err)
	}
	resumed := time.Since(begun)
	t.Logf("pause with memory: %v (%d bytes resident before); resume: %v", paused, rss, resumed)
	if obj, err := d.Inspect(ctx(t), s.id); err != nil || obj.State != driver.StateRunning {
		t.Fatalf("after its resume: %+v, %v; want running", obj, err)
	}
	if got, n2 := ask(t, s); got != secret || n2 < n1 {
		t.Errorf("after its resume the sandbox tells %q %d; want %q from %d on", got, n2, secret, n1)
	}
	if err := d.Resume(ctx(t), ref); err != nil {
		t.Errorf("a resume of a running sandbox: %v; want none", err)
	}

	if err := d.PauseMemory(ctx(t), ref); err != nil {
		t.Fatal(err)
	}
	if err := d.Stop(ctx(t), ref, driver.StopOptions{Timeout: 5 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if obj, err := d.Inspect(ctx(t), s.id); err != nil || obj.State != driver.StateStopped {
		t.Errorf("a sandbox stopped while paused with its memory out: %+v, %v; want stopped", obj, err)
	}

	frozen := startSandbox(t, d, "frozen", checkpointPolicy)
	fref := driver.Ref{ID: frozen.id, Generation: 1}
	if err := d.Pause(ctx(t), fref); err != nil {
		t.Fatal(err)
	}
	if err := d.PauseMemory(ctx(t), fref); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("a pause with memory of a frozen sandbox: %v; want FailedPrecondition", err)
	}
	host := startSandbox(t, d, "namespaces", "version: 1\n")
	if err := d.PauseMemory(ctx(t), driver.Ref{ID: host.id, Generation: 1}); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "CRIU") {
		t.Errorf("a pause with memory on the namespaces tier: %v; want FailedPrecondition saying why", err)
	}
}
