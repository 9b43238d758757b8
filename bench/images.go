package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
	"github.com/corral-sandbox/corral/internal/testenv"
)

// imageFiller is the random (incompressible) content of the image the
// images benchmark runs, beside the test image's busybox.
const imageFiller = 50 << 20

// The operations of the images benchmark.
var imageOps = []string{"first create→ready (unpack)", "warm create→ready"}

// benchImages times the native driver's create of a 50 MB image from a
// `docker save` archive, first with an empty cache (it unpacks every
// layer) and then warm, beside the Docker Engine loading the same archive
// and running it (first), and running it again (warm).
func benchImages(bin, home string, n, warmup int) (*table, error) {
	if err := os.MkdirAll(home, 0o700); err != nil {
		return nil, err
	}
	img, err := testenv.TestOCIImage(home, imageFiller)
	if err != nil {
		return nil, err
	}
	api, err := client.New(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return nil, err
	}
	defer api.Close()
	g, err := startGateway(bin, filepath.Join(home, "gateway"), "--driver", "native")
	if err != nil {
		return nil, err
	}
	defer g.close()
	ref := "docker-archive:" + img.DockerArchive
	t := newTable("images: a 50 MB image on the native driver vs the Docker Engine (docker load + run)", imageOps, []string{"docker"})
	for i := range n + warmup {
		first, err := g.create(fmt.Sprintf("img-first-%d", i), &corralv1.SandboxSpec{Image: ref})
		if err != nil {
			return nil, fmt.Errorf("corral first create %d: %w", i, err)
		}
		warm, err := g.create(fmt.Sprintf("img-warm-%d", i), &corralv1.SandboxSpec{Image: ref})
		if err != nil {
			return nil, fmt.Errorf("corral warm create %d: %w", i, err)
		}
		for _, name := range []string{fmt.Sprintf("img-first-%d", i), fmt.Sprintf("img-warm-%d", i)} {
			if err := g.remove(name); err != nil {
				return nil, err
			}
			if err := g.waitPhase(name, ""); err != nil {
				return nil, err
			}
		}
		if _, err := g.api.PruneImages(context.Background(), &corralv1.PruneImagesRequest{}); err != nil {
			return nil, fmt.Errorf("prune: %w", err)
		}
		dockerFirst, dockerWarm, err := dockerLoadAndRun(api, img.DockerArchive, i)
		if err != nil {
			return nil, fmt.Errorf("docker run %d: %w", i, err)
		}
		if i < warmup {
			continue
		}
		t.add(imageOps[0], "corral", first)
		t.add(imageOps[1], "corral", warm)
		t.add(imageOps[0], "docker", dockerFirst)
		t.add(imageOps[1], "docker", dockerWarm)
	}
	return t, nil
}

// dockerLoadAndRun times the engine loading archive and running its image
// (first), then running it again (warm), and removes what it made.
func dockerLoadAndRun(api *client.Client, archive string, i int) (first, warm time.Duration, err error) {
	ctx := context.Background()
	_, _ = api.ImageRemove(ctx, testenv.ImageTag, client.ImageRemoveOptions{Force: true})
	t0 := time.Now()
	f, err := os.Open(archive)
	if err != nil {
		return 0, 0, err
	}
	res, err := api.ImageLoad(ctx, f, client.ImageLoadWithQuiet(true))
	if err == nil {
		_, err = io.Copy(io.Discard, res) // the load ends with its answer
		res.Close()
	}
	f.Close()
	if err != nil {
		return 0, 0, err
	}
	runs := make([]time.Duration, 2)
	for j := range runs {
		t1 := time.Now()
		name := fmt.Sprintf("bench-image-%d-%d", i, j)
		c, err := api.ContainerCreate(ctx, client.ContainerCreateOptions{Name: name,
			Config:     &container.Config{Image: testenv.ImageTag},
			HostConfig: &container.HostConfig{NetworkMode: "none"}})
		if err != nil {
			return 0, 0, err
		}
		defer api.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true})
		if _, err := api.ContainerStart(ctx, c.ID, client.ContainerStartOptions{}); err != nil {
			return 0, 0, err
		}
		runs[j] = time.Since(t1)
	}
	return time.Since(t0) - runs[1], runs[1], nil
}
