package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
	"github.com/corral-sandbox/corral/internal/testenv"
)

// dockerCommand is what both sides run: it exits on SIGTERM even as PID 1.
var dockerCommand = []string{"sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1; done"}

// benchDocker times the Docker driver against the Engine API.
func benchDocker(bin, home string, n, warmup int) (*table, error) {
	g, api, err := dockerPair(bin, home)
	if err != nil {
		return nil, err
	}
	defer g.close()
	defer api.Close()

	t := newTable("corral Docker driver vs Docker Engine API", append(slices.Clone(cycleOps), pauseOps...), []string{"docker"})
	for i := range n + warmup {
		cd, err := g.cycle(fmt.Sprintf("bench-%d", i), dockerCommand)
		if err != nil {
			return nil, fmt.Errorf("corral run %d: %w", i, err)
		}
		dd, err := directCycle(api, fmt.Sprintf("bench-direct-%d", i))
		if err != nil {
			return nil, fmt.Errorf("direct run %d: %w", i, err)
		}
		if i < warmup {
			continue
		}
		for j, op := range cycleOps {
			t.add(op, "corral", cd[j])
			t.add(op, "docker", dd[j])
		}
	}
	if err := pauseDocker(g, api, t, n, warmup); err != nil {
		return nil, err
	}
	return t, nil
}

// pauseOps are the operations pauseDocker times.
var pauseOps = []string{"pause", "resume"}

// pauseDocker times pause→paused and resume→ready of one running sandbox
// beside the Engine API's pause and unpause of one running container.
func pauseDocker(g *gateway, api *client.Client, t *table, n, warmup int) error {
	return pauseBeside(g, api, t, "pause", "resume", dockerCommand, n, warmup)
}

// pauseBeside times the pause→paused and resume→ready of one sandbox of
// g running command, as the operations pause and resume of t, beside the
// engine's pause and unpause of one container.
func pauseBeside(g *gateway, api *client.Client, t *table, pause, resume string, command []string, n, warmup int) error {
	ctx := context.Background()
	if _, err := g.create("bench-pause", &corralv1.SandboxSpec{Command: command}); err != nil {
		return err
	}
	defer g.remove("bench-pause")
	id, err := directRun(ctx, api, "bench-pause-direct")
	if err != nil {
		return err
	}
	defer api.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true})
	for i := range n + warmup {
		paused, err := g.timed("bench-pause", "paused", func() error {
			_, err := g.api.PauseSandbox(ctx, &corralv1.PauseSandboxRequest{Name: "bench-pause"})
			return err
		})
		if err != nil {
			return fmt.Errorf("corral pause: %w", err)
		}
		resumed, err := g.timed("bench-pause", "ready", func() error {
			_, err := g.api.ResumeSandbox(ctx, &corralv1.ResumeSandboxRequest{Name: "bench-pause"})
			return err
		})
		if err != nil {
			return fmt.Errorf("corral resume: %w", err)
		}
		direct, err := timed(func() error { _, err := api.ContainerPause(ctx, id, client.ContainerPauseOptions{}); return err })
		if err != nil {
			return err
		}
		unpaused, err := timed(func() error { _, err := api.ContainerUnpause(ctx, id, client.ContainerUnpauseOptions{}); return err })
		if err != nil {
			return err
		}
		if i >= warmup {
			t.add(pause, "corral", paused)
			t.add(pause, "docker", direct)
			t.add(resume, "corral", resumed)
			t.add(resume, "docker", unpaused)
		}
	}
	return nil
}

// directCycle does the same through the Engine API: create+start, stop,
// start, remove.
func directCycle(api *client.Client, name string) ([]time.Duration, error) {
	ctx := context.Background()
	var out []time.Duration
	t0 := time.Now()
	id, err := directRun(ctx, api, name)
	if err != nil {
		return nil, err
	}
	out = append(out, time.Since(t0))
	secs := 10
	t0 = time.Now()
	if _, err := api.ContainerStop(ctx, id, client.ContainerStopOptions{Timeout: &secs}); err != nil {
		return nil, err
	}
	out = append(out, time.Since(t0))
	t0 = time.Now()
	if _, err := api.ContainerStart(ctx, id, client.ContainerStartOptions{}); err != nil {
		return nil, err
	}
	out = append(out, time.Since(t0))
	t0 = time.Now()
	if _, err := api.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true}); err != nil {
		return nil, err
	}
	out = append(out, time.Since(t0))
	return out, nil
}

// directRun creates and starts a container of dockerCommand through the
// Engine API, as the driver's create→ready does, and returns its id.
func directRun(ctx context.Context, api *client.Client, name string) (string, error) {
	res, err := api.ContainerCreate(ctx, client.ContainerCreateOptions{Name: name,
		Config:     &container.Config{Image: testenv.TestImage, Cmd: dockerCommand, Labels: map[string]string{ttiLabel: "true"}},
		HostConfig: &container.HostConfig{NetworkMode: "none"}})
	if err != nil {
		return "", err
	}
	_, err = api.ContainerStart(ctx, res.ID, client.ContainerStartOptions{})
	return res.ID, err
}

// dockerPair starts a Docker gateway on the test image and a client of
// the same engine, for corral and its peer.
func dockerPair(bin, home string) (*gateway, *client.Client, error) {
	g, err := startGateway(bin, home, "--driver", "docker", "--image-pull-policy", "never", "--default-image", testenv.TestImage)
	if err != nil {
		return nil, nil, err
	}
	api, err := client.New(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		g.close()
		return nil, nil, err
	}
	return g, api, nil
}
