package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
	"github.com/corral-sandbox/corral/internal/testenv"
)

// snapshotOps are what benchSnapshots times.
var snapshotOps = []string{"snapshot 1 GiB", "restore 1 GiB", "fork of 10", "native pause", "native resume"}

// forks is how many sandboxes the fork makes.
const forks = 10

// fillCommand writes 1 GiB of random bytes to dir/data, then marks it done
// and waits (exiting on SIGTERM even as PID 1).
func fillCommand(dir string) []string {
	return []string{"sh", "-c", fmt.Sprintf("dd if=/dev/urandom of=%[1]s/data bs=1M count=1024 2>/dev/null; touch %[1]s/done; trap 'exit 0' TERM; while :; do sleep 1; done", dir)}
}

// benchSnapshots times, on the Docker driver, a snapshot of a sandbox
// whose /sandbox holds 1 GiB, a restore of it (create --from-snapshot →
// ready) and a fork of 10 (all ready), beside docker commit of a container
// holding the same 1 GiB, docker run of the committed image, and 10 of
// those at once; and the native driver's pause→paused and resume→ready
// beside the engine's pause and unpause.
func benchSnapshots(bin, home string, n, warmup int) (*table, error) {
	g, api, err := dockerPair(bin, home+"/docker")
	if err != nil {
		return nil, err
	}
	defer g.close()
	defer api.Close()
	ctx := context.Background()
	t := newTable("corral snapshots (Docker driver; pause on the native driver) vs docker commit + docker run, pause and unpause", snapshotOps, []string{"docker"})

	if _, err := g.create("bench-full", &corralv1.SandboxSpec{Command: fillCommand("/sandbox")}); err != nil {
		return nil, err
	}
	defer g.remove("bench-full")
	res, err := api.ContainerCreate(ctx, client.ContainerCreateOptions{Name: "bench-full-direct",
		Config:     &container.Config{Image: testenv.TestImage, Cmd: fillCommand(""), Labels: map[string]string{ttiLabel: "true"}},
		HostConfig: &container.HostConfig{NetworkMode: "none"}})
	if err != nil {
		return nil, err
	}
	defer api.ContainerRemove(ctx, res.ID, client.ContainerRemoveOptions{Force: true})
	if _, err := api.ContainerStart(ctx, res.ID, client.ContainerStartOptions{}); err != nil {
		return nil, err
	}
	files := corralv1.NewFileServiceClient(g.conn)
	if err := testenv.Until(5*time.Minute, func() error {
		if _, err := files.StatFile(ctx, &corralv1.StatFileRequest{Sandbox: "bench-full", Path: "/sandbox/done"}); err != nil {
			return err
		}
		_, err := api.ContainerStatPath(ctx, res.ID, client.ContainerStatPathOptions{Path: "/done"})
		return err
	}); err != nil {
		return nil, fmt.Errorf("filling 1 GiB: %w", err)
	}

	snaps := corralv1.NewSnapshotServiceClient(g.conn)
	for i := range n + warmup {
		name := fmt.Sprintf("bench-snap-%d", i)
		took, err := timed(func() error {
			_, err := snaps.CreateSnapshot(ctx, &corralv1.CreateSnapshotRequest{Sandbox: "bench-full", Name: name})
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("corral snapshot: %w", err)
		}
		var image string
		committed, err := timed(func() error {
			c, err := api.ContainerCommit(ctx, res.ID, client.ContainerCommitOptions{Reference: fmt.Sprintf("corral-bench/commit:%d", i)})
			image = c.ID
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("docker commit: %w", err)
		}
		restored, err := timed(func() error {
			if _, err := g.api.CreateSandbox(ctx, &corralv1.CreateSandboxRequest{Name: name + "-r", FromSnapshot: name}); err != nil {
				return err
			}
			return g.waitPhase(name+"-r", "ready")
		})
		if err != nil {
			return nil, fmt.Errorf("corral restore: %w", err)
		}
		run, err := timed(func() error { return runImages(ctx, api, image, fmt.Sprintf("bench-run-%d", i), 1) })
		if err != nil {
			return nil, fmt.Errorf("docker run: %w", err)
		}
		forked, err := timed(func() error {
			resp, err := snaps.ForkSandbox(ctx, &corralv1.ForkSandboxRequest{Sandbox: name + "-r", Count: forks, NamePrefix: name + "-f"})
			if err != nil {
				return err
			}
			for _, sb := range resp.Sandboxes {
				if err := g.waitPhase(sb.Name, "ready"); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("corral fork: %w", err)
		}
		runs, err := timed(func() error { return runImages(ctx, api, image, fmt.Sprintf("bench-fork-%d", i), forks) })
		if err != nil {
			return nil, fmt.Errorf("docker run of %d: %w", forks, err)
		}
		g.remove(name + "-r")
		for f := 1; f <= forks; f++ {
			g.remove(fmt.Sprintf("%s-f-%d", name, f))
		}
		snaps.DeleteSnapshot(ctx, &corralv1.DeleteSnapshotRequest{Name: name})
		api.ImageRemove(ctx, image, client.ImageRemoveOptions{Force: true})
		if i < warmup {
			continue
		}
		t.add("snapshot 1 GiB", "corral", took)
		t.add("snapshot 1 GiB", "docker", committed)
		t.add("restore 1 GiB", "corral", restored)
		t.add("restore 1 GiB", "docker", run)
		t.add("fork of 10", "corral", forked)
		t.add("fork of 10", "docker", committed+runs) // a fork is a snapshot and the runs
	}
	return t, pauseNative(bin, home+"/native", api, t, n, warmup)
}

// runImages runs count containers of image at once and removes them once
// all run.
func runImages(ctx context.Context, api *client.Client, image, prefix string, count int) error {
	ids := make([]string, count)
	errs := make([]error, count)
	var wg sync.WaitGroup
	for i := range count {
		wg.Go(func() {
			res, err := api.ContainerCreate(ctx, client.ContainerCreateOptions{Name: fmt.Sprintf("%s-%d", prefix, i),
				Config:     &container.Config{Image: image, Cmd: dockerCommand, Labels: map[string]string{ttiLabel: "true"}},
				HostConfig: &container.HostConfig{NetworkMode: "none"}})
			if err == nil {
				ids[i] = res.ID
				_, err = api.ContainerStart(ctx, res.ID, client.ContainerStartOptions{})
			}
			errs[i] = err
		})
	}
	wg.Wait()
	defer func() {
		for _, id := range ids {
			if id != "" {
				api.ContainerRemove(context.Background(), id, client.ContainerRemoveOptions{Force: true})
			}
		}
	}()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// pauseNative times the native driver's pause→paused and resume→ready of
// one running sandbox beside the engine's pause and unpause of a container.
func pauseNative(bin, home string, api *client.Client, t *table, n, warmup int) error {
	g, err := startGateway(bin, home, "--driver", "native")
	if err != nil {
		return err
	}
	defer g.close()
	return pauseBeside(g, api, t, "native pause", "native resume", nativeCommand, n, warmup)
}
