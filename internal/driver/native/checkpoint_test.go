package native

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
