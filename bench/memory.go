package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
	"github.com/corral-sandbox/corral/internal/testenv"
)

// memoryOps are what benchMemory times.
var memoryOps = []string{"memory checkpoint", "restore from it", "pause --memory", "resume from it"}

// memoryPolicy is a gVisor sandbox that can be checkpointed.
const memoryPolicy = "version: 1\nisolation: gvisor\nlifecycle:\n  memory_snapshots: true\n"

// benchMemory times, on the native driver's gVisor tier, a memory
// snapshot of a running Python program (snapshot --memory, returned with
// the sandbox going on) and a sandbox made from it (create → ready),
// and a pause --memory → paused and resume → ready of it, beside runsc
// checkpoint and runsc restore of the same program called directly, on a
// bundle of the host's root.
func benchMemory(bin, home string, n, warmup int) (*table, error) {
	g, err := startGateway(bin, home, "--driver", "native")
	if err != nil {
		return nil, err
	}
	defer g.close()
	ctx := context.Background()
	t := newTable("memory snapshots on native's gVisor tier (a Python program) vs runsc checkpoint and restore called directly", memoryOps, []string{"runsc"})
	server := []string{"/usr/bin/python3", "-c", testenv.MemoryServer}
	if _, err := g.create("mem-src", &corralv1.SandboxSpec{Command: server, Policy: memoryPolicy}); err != nil {
		return nil, err
	}
	defer g.remove("mem-src")
	direct, err := newRunscBundle(filepath.Join(home, "runsc"), server)
	if err != nil {
		return nil, err
	}
	snaps := corralv1.NewSnapshotServiceClient(g.conn)
	for i := range n + warmup {
		name := fmt.Sprintf("bench-mem-%d", i)
		took, err := timed(func() error {
			_, err := snaps.CreateSnapshot(ctx, &corralv1.CreateSnapshotRequest{Sandbox: "mem-src", Name: name, Memory: true})
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("corral snapshot --memory: %w", err)
		}
		restored, err := timed(func() error {
			if _, err := g.api.CreateSandbox(ctx, &corralv1.CreateSandboxRequest{Name: name + "-r", FromSnapshot: name}); err != nil {
				return err
			}
			return g.waitPhase(name+"-r", "ready")
		})
		if err != nil {
			return nil, fmt.Errorf("corral restore of a memory snapshot: %w", err)
		}
		g.remove(name + "-r")
		snaps.DeleteSnapshot(ctx, &corralv1.DeleteSnapshotRequest{Name: name})
		paused, err := g.timed("mem-src", "paused", func() error {
			_, err := g.api.PauseSandbox(ctx, &corralv1.PauseSandboxRequest{Name: "mem-src", Memory: true})
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("corral pause --memory: %w", err)
		}
		resumed, err := g.timed("mem-src", "ready", func() error {
			_, err := g.api.ResumeSandbox(ctx, &corralv1.ResumeSandboxRequest{Name: "mem-src"})
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("corral resume after pause --memory: %w", err)
		}
		checkpoint, restore, err := direct.cycle(i)
		if err != nil {
			return nil, err
		}
		if i < warmup {
			continue
		}
		t.add("memory checkpoint", "corral", took)
		t.add("memory checkpoint", "runsc", checkpoint)
		t.add("restore from it", "corral", restored)
		t.add("restore from it", "runsc", restore)
		t.add("pause --memory", "corral", paused)
		t.add("pause --memory", "runsc", checkpoint)
		t.add("resume from it", "corral", resumed)
		t.add("resume from it", "runsc", restore)
	}
	return t, nil
}

// runscBundle is an OCI bundle of a command on the host's root, run by
// runsc on its own network stack, as the gVisor tier's checkpointable
// sandboxes are.
type runscBundle struct{ dir string }

func newRunscBundle(dir string, command []string) (*runscBundle, error) {
	spec := map[string]any{
		"ociVersion": "1.0.2",
		"process": map[string]any{"user": map[string]int{"uid": 0, "gid": 0}, "args": command, "cwd": "/",
			"env": []string{"PATH=/usr/bin:/bin"}, "capabilities": map[string][]string{"bounding": {}, "effective": {}, "permitted": {}}},
		"root":   map[string]any{"path": "/", "readonly": true},
		"mounts": []map[string]string{{"destination": "/proc", "type": "proc", "source": "proc"}, {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs"}},
	}
	data, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(dir, "bundle"), 0o700); err != nil {
		return nil, err
	}
	return &runscBundle{dir: dir}, os.WriteFile(filepath.Join(dir, "bundle", "config.json"), data, 0o600)
}

// runsc runs a runsc subcommand, its output kept in a file (a detached
// container holds what it was given) for an error.
func (b *runscBundle) runsc(args ...string) error {
	out, err := os.CreateTemp(b.dir, "runsc-*.log")
	if err != nil {
		return err
	}
	defer os.Remove(out.Name())
	defer out.Close()
	cmd := exec.Command("runsc", append([]string{"--root", filepath.Join(b.dir, "state"), "--network=none", "--ignore-cgroups"}, args...)...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Run(); err != nil {
		said, _ := os.ReadFile(out.Name())
		return fmt.Errorf("runsc %s: %v: %s", args[0], err, said)
	}
	return nil
}

// cycle runs the command detached, waits until its program answers, then
// times a checkpoint and a restore of it into a second container.
func (b *runscBundle) cycle(i int) (checkpoint, restore time.Duration, err error) {
	id, image := fmt.Sprintf("bench-%d", i), filepath.Join(b.dir, fmt.Sprintf("image-%d", i))
	defer os.RemoveAll(image)
	defer b.runsc("delete", "--force", id+"-r")
	defer b.runsc("delete", "--force", id)
	bundle := filepath.Join(b.dir, "bundle")
	if err := b.runsc("run", "--bundle", bundle, "--detach", id); err != nil {
		return 0, 0, err
	}
	if err := testenv.Until(30*time.Second, func() error {
		return b.runsc(append([]string{"exec", id}, testenv.AskMemoryServer...)...)
	}); err != nil {
		return 0, 0, fmt.Errorf("the program under runsc does not answer: %w", err)
	}
	if checkpoint, err = timed(func() error { return b.runsc("checkpoint", "--image-path", image, id) }); err != nil {
		return 0, 0, err
	}
	restore, err = timed(func() error {
		return b.runsc("restore", "--image-path", image, "--bundle", bundle, "--detach", id+"-r")
	})
	return checkpoint, restore, err
}
