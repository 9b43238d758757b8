// Command bench measures corral's sandbox operations next to the nearest
// peer, in the same run on the same machine, and prints the ratios. Today:
// the Docker driver against the Docker Engine API called directly, for
// create→ready, stop, start and delete, with the same image and command.
// Peer and corral runs are interleaved; warm-up runs are discarded.
//
//	go run ./bench [-n 20] [-warmup 2]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
	"github.com/corral-sandbox/corral/internal/testenv"
)

// command is what both sides run: it exits on SIGTERM even as PID 1.
var command = []string{"sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1; done"}

var ops = []string{"create→ready", "stop", "start", "delete --force"}

func main() {
	n := flag.Int("n", 20, "measured runs per operation")
	warmup := flag.Int("warmup", 2, "runs discarded before measuring")
	flag.Parse()
	if err := run(*n, *warmup); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(n, warmup int) error {
	dir, err := os.MkdirTemp("", "corral-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin, err := testenv.BuildCorral(dir)
	if err != nil {
		return err
	}
	home := filepath.Join(dir, "home")
	gw := exec.Command(bin, "--home", home, "gateway", "--driver", "docker", "--image-pull-policy", "never",
		"--default-image", testenv.TestImage, "--sandbox-label", "corral.bench", "--log-level", "warn")
	gw.Stderr = os.Stderr
	if err := gw.Start(); err != nil {
		return err
	}
	defer func() { gw.Process.Signal(syscall.SIGTERM); gw.Wait() }()
	conn, err := grpc.NewClient("unix://"+filepath.Join(home, "corral.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	c := corralv1.NewSandboxServiceClient(conn)
	if err := waitAnswer(c); err != nil {
		return err
	}
	api, err := client.New(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return err
	}
	defer api.Close()

	corral := map[string][]time.Duration{}
	direct := map[string][]time.Duration{}
	for i := range n + warmup {
		cd, err := corralCycle(c, fmt.Sprintf("bench-%d", i))
		if err != nil {
			return fmt.Errorf("corral run %d: %w", i, err)
		}
		dd, err := directCycle(api, fmt.Sprintf("bench-direct-%d", i))
		if err != nil {
			return fmt.Errorf("direct run %d: %w", i, err)
		}
		if i < warmup {
			continue
		}
		for j, op := range ops {
			corral[op] = append(corral[op], cd[j])
			direct[op] = append(direct[op], dd[j])
		}
	}
	host, _ := os.Hostname()
	fmt.Printf("corral Docker driver vs Docker Engine API, %d runs (after %d warm-up), interleaved, on %s\n", n, warmup, host)
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "operation\tcorral p50\tp95\tmax\tdocker p50\tp95\tmax\tratio p50\t")
	for _, op := range ops {
		a, b := stats(corral[op]), stats(direct[op])
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.2f×\t\n", op, ms(a[0]), ms(a[1]), ms(a[2]), ms(b[0]), ms(b[1]), ms(b[2]),
			float64(a[0])/float64(b[0]))
	}
	return tw.Flush()
}

func waitAnswer(c corralv1.SandboxServiceClient) error {
	for range 300 {
		if _, err := c.ListSandboxes(context.Background(), &corralv1.ListSandboxesRequest{}); err == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("the gateway did not answer")
}

// corralCycle times create→ready, stop, start and delete through the API,
// each until the record shows it done (ready means the main process runs).
func corralCycle(c corralv1.SandboxServiceClient, name string) ([]time.Duration, error) {
	ctx := context.Background()
	var out []time.Duration
	t0 := time.Now()
	if _, err := c.CreateSandbox(ctx, &corralv1.CreateSandboxRequest{Name: name, Spec: &corralv1.SandboxSpec{Command: command}}); err != nil {
		return nil, err
	}
	steps := []struct {
		call  func() error
		phase string
	}{
		{func() error { return nil }, "ready"},
		{func() error { _, err := c.StopSandbox(ctx, &corralv1.StopSandboxRequest{Name: name}); return err }, "stopped"},
		{func() error { _, err := c.StartSandbox(ctx, &corralv1.StartSandboxRequest{Name: name}); return err }, "ready"},
		{func() error {
			// --force, as the peer's remove with force: no graceful stop
			_, err := c.DeleteSandbox(ctx, &corralv1.DeleteSandboxRequest{Name: name, Force: true})
			return err
		}, ""},
	}
	for i, s := range steps {
		if i > 0 {
			t0 = time.Now()
		}
		if err := s.call(); err != nil {
			return nil, err
		}
		if err := waitPhase(c, name, s.phase); err != nil {
			return nil, err
		}
		out = append(out, time.Since(t0))
	}
	return out, nil
}

// waitPhase follows the sandbox until it is in phase ("" = deleted).
func waitPhase(c corralv1.SandboxServiceClient, name, phase string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stream, err := c.WatchSandboxes(ctx, &corralv1.WatchSandboxesRequest{Name: name})
	if err != nil {
		return err
	}
	seen := false
	for {
		ev, err := stream.Recv()
		if err != nil {
			return fmt.Errorf("waiting for %s %q: %w", name, phase, err)
		}
		switch {
		case ev.Type == "SYNCED" && phase == "" && !seen:
			return nil
		case ev.Type == "DELETED" && phase == "":
			return nil
		case ev.Sandbox != nil && ev.Sandbox.Phase == phase:
			return nil
		case ev.Sandbox != nil:
			seen = true
		}
	}
}

// directCycle does the same through the Engine API: create+start, stop,
// start, remove.
func directCycle(api *client.Client, name string) ([]time.Duration, error) {
	ctx := context.Background()
	var out []time.Duration
	t0 := time.Now()
	res, err := api.ContainerCreate(ctx, client.ContainerCreateOptions{Name: name,
		Config:     &container.Config{Image: testenv.TestImage, Cmd: command},
		HostConfig: &container.HostConfig{NetworkMode: "none"}})
	if err != nil {
		return nil, err
	}
	if _, err := api.ContainerStart(ctx, res.ID, client.ContainerStartOptions{}); err != nil {
		return nil, err
	}
	out = append(out, time.Since(t0))
	secs := 10
	t0 = time.Now()
	if _, err := api.ContainerStop(ctx, res.ID, client.ContainerStopOptions{Timeout: &secs}); err != nil {
		return nil, err
	}
	out = append(out, time.Since(t0))
	t0 = time.Now()
	if _, err := api.ContainerStart(ctx, res.ID, client.ContainerStartOptions{}); err != nil {
		return nil, err
	}
	out = append(out, time.Since(t0))
	t0 = time.Now()
	if _, err := api.ContainerRemove(ctx, res.ID, client.ContainerRemoveOptions{Force: true}); err != nil {
		return nil, err
	}
	out = append(out, time.Since(t0))
	return out, nil
}

// stats returns p50, p95 and max.
func stats(d []time.Duration) [3]time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	at := func(q float64) time.Duration { return s[min(len(s)-1, int(q*float64(len(s))))] }
	return [3]time.Duration{at(0.5), at(0.95), s[len(s)-1]}
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d.Microseconds())/1000) }
