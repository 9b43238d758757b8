package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
	"github.com/corral-sandbox/corral/internal/testenv"
)

// Time to interactive: from the create call to the first `exec echo`
// returning, the measure users compare sandbox services by.

// ttiModes are how the iterations are started: one after another, one
// every ttiStagger, or all at once.
var ttiModes = []string{"sequential", "staggered", "burst"}

// ttiStagger is the gap between the staggered mode's starts.
const ttiStagger = 200 * time.Millisecond

// ttiCommand keeps each sandbox running until it is removed.
var ttiCommand = []string{"sleep", "1000"}

// ttiSubject is one way of getting an interactive sandbox: prepare (when
// set) readies a mode of n iterations, untimed; run makes the i-th and
// returns how long until its echo answered; cleanup removes what a mode
// made; figures (when set) adds figures of its own for a mode once it ran.
type ttiSubject struct {
	name    string
	run     func(i int) (time.Duration, error)
	cleanup func() error
	prepare func(n int) error
	figures func(mode string) []*figure
}

// benchTTI measures time to interactive on both drivers, beside `docker
// run -d` + `docker exec` and a bwrap running the echo, in each mode.
func benchTTI(bin, dir string, n int, nativeOnly bool) (*table, []*figure, error) {
	native, err := startGateway(bin, filepath.Join(dir, "native"), "--driver", "native")
	if err != nil {
		return nil, nil, err
	}
	defer native.close()
	subjects := []ttiSubject{
		{name: "corral native", run: native.interactive, cleanup: native.removeAll},
		{name: "bwrap echo", run: bwrapEcho, cleanup: func() error { return nil }},
		poolSubject("corral native pool", native, "", 5*time.Millisecond),
	}
	if !nativeOnly {
		api, err := client.New(client.FromEnv, client.WithAPIVersionNegotiation())
		if err != nil {
			return nil, nil, err
		}
		defer api.Close()
		docker, err := startGateway(bin, filepath.Join(dir, "docker"), "--driver", "docker", "--image-pull-policy", "never", "--default-image", testenv.TestImage)
		if err != nil {
			return nil, nil, err
		}
		defer docker.close()
		subjects = append(subjects,
			ttiSubject{name: "corral docker", run: docker.interactive, cleanup: docker.removeAll},
			ttiSubject{name: "docker run -d + exec", run: func(i int) (time.Duration, error) { return dockerInteractive(api, i) }, cleanup: func() error { return removeTTIContainers(api) }},
			poolSubject("corral docker pool", docker, testenv.TestImage, 20*time.Millisecond))
	}
	peers := make([]string, 0, len(subjects)-1)
	for _, s := range subjects[1:] {
		peers = append(peers, s.name)
	}
	t := newTable(fmt.Sprintf("time to interactive: create → first exec echo returning, %d iterations per mode (staggered: %s apart)", n, ttiStagger), ttiModes, peers)
	var figs []*figure
	for _, mode := range ttiModes {
		for _, s := range subjects {
			if s.prepare != nil {
				if err := s.prepare(n); err != nil {
					return nil, nil, fmt.Errorf("%s: prepare %s: %w", s.name, mode, err)
				}
			}
			times, failed := runTTIMode(mode, n, s.run)
			if err := s.cleanup(); err != nil {
				return nil, nil, fmt.Errorf("%s: clean up after %s: %w", s.name, mode, err)
			}
			who := s.name
			if who == subjects[0].name {
				who = "corral" // the table's own column
			}
			for _, d := range times {
				t.add(mode, who, d)
			}
			figs = append(figs, ttiFigures(s.name, mode, times, n-failed, n)...)
			if s.figures != nil {
				figs = append(figs, s.figures(mode)...)
			}
		}
	}
	return t, figs, nil
}

// runTTIMode runs n iterations in mode and returns the times of those that
// succeeded and how many failed.
func runTTIMode(mode string, n int, run func(i int) (time.Duration, error)) ([]time.Duration, int) {
	var (
		mu     sync.Mutex
		times  []time.Duration
		failed int
		wg     sync.WaitGroup
	)
	one := func(i int) {
		d, err := run(i)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			failed++
			return
		}
		times = append(times, d)
	}
	for i := range n {
		switch mode {
		case "sequential":
			one(i)
		default:
			wg.Add(1)
			go func() { defer wg.Done(); one(i) }()
			if mode == "staggered" {
				time.Sleep(ttiStagger)
			}
		}
	}
	wg.Wait()
	return times, failed
}

// ttiFigures are the min, p99 and success rate of one subject in one mode
// (the table has p50, p95 and max).
func ttiFigures(subject, mode string, times []time.Duration, ok, n int) []*figure {
	figs := []*figure{{Name: fmt.Sprintf("%s, %s: success", subject, mode), Value: 100 * float64(ok) / float64(n), Unit: "%"}}
	if len(times) == 0 {
		return figs
	}
	sorted := slices.Sorted(slices.Values(times))
	p99 := sorted[min(len(sorted)-1, len(sorted)*99/100)]
	return append(figs,
		&figure{Name: fmt.Sprintf("%s, %s: min", subject, mode), Value: float64(sorted[0].Microseconds()) / 1000, Unit: "ms"},
		&figure{Name: fmt.Sprintf("%s, %s: p99", subject, mode), Value: float64(p99.Microseconds()) / 1000, Unit: "ms"})
}

// interactive creates a sandbox, waits until it is ready, as `corral
// sandbox create` does, and runs `echo x` in it.
func (g *gateway) interactive(i int) (time.Duration, error) {
	_, d, err := g.readyEcho(fmt.Sprintf("tti-%d", i), "")
	return d, err
}

// readyEcho creates a sandbox of the policy, and returns how long until it
// was ready and until `echo x` in it answered.
func (g *gateway) readyEcho(name, policy string) (ready, interactive time.Duration, err error) {
	t0 := time.Now()
	if ready, err = g.create(name, &corralv1.SandboxSpec{Command: ttiCommand, Policy: policy}); err != nil {
		return 0, 0, err
	}
	if err := g.echo(name); err != nil {
		return 0, 0, err
	}
	return ready, time.Since(t0), nil
}

// echo runs `echo x` in a sandbox through the API and checks what it says.
func (g *gateway) echo(name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stream, err := g.api.ExecSandbox(ctx)
	if err != nil {
		return err
	}
	err = stream.Send(&corralv1.ExecRequest{Msg: &corralv1.ExecRequest_Start{Start: &corralv1.ExecStart{Name: name, Command: []string{"echo", "x"}}}})
	if err != nil {
		return err
	}
	if err := stream.CloseSend(); err != nil {
		return err
	}
	var out bytes.Buffer
	for {
		resp, err := stream.Recv()
		if err != nil {
			return fmt.Errorf("exec in %s: %w", name, err)
		}
		out.Write(resp.GetStdout())
		if code, ok := resp.Msg.(*corralv1.ExecResponse_ExitCode); ok {
			if code.ExitCode != 0 || out.String() != "x\n" {
				return fmt.Errorf("exec in %s: exit %d, %q", name, code.ExitCode, out.String())
			}
			return nil
		}
	}
}

// bwrapEcho runs the echo in bwrap's new namespaces, as the native bench's
// peer does: bwrap makes and runs in one step.
func bwrapEcho(int) (time.Duration, error) {
	argv := append(slices.Clone(nativePeers[0].argv), "echo", "x")
	t0 := time.Now()
	out, err := exec.Command(argv[0], argv[1:]...).Output()
	d := time.Since(t0)
	if err != nil || string(out) != "x\n" {
		return 0, fmt.Errorf("bwrap echo: %q, %v", out, err)
	}
	return d, nil
}

// ttiLabel marks the containers of the docker peer.
const ttiLabel = "corral.bench.tti"

// dockerInteractive is `docker run -d` then `docker exec echo x` through
// the Engine API.
func dockerInteractive(api *client.Client, i int) (time.Duration, error) {
	_, d, err := dockerRunExec(api, fmt.Sprintf("corral-bench-tti-%d", i), "")
	return d, err
}

// dockerRunExec is `docker run -d [--runtime RUNTIME]` then `docker exec
// echo x` through the Engine API: it returns how long until the container
// ran, and until the echo answered.
func dockerRunExec(api *client.Client, name, runtime string) (ran, interactive time.Duration, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	t0 := time.Now()
	res, err := api.ContainerCreate(ctx, client.ContainerCreateOptions{Name: name,
		Config:     &container.Config{Image: testenv.TestImage, Cmd: ttiCommand, Labels: map[string]string{ttiLabel: "true"}},
		HostConfig: &container.HostConfig{NetworkMode: "none", Runtime: runtime}})
	if err != nil {
		return 0, 0, err
	}
	if _, err := api.ContainerStart(ctx, res.ID, client.ContainerStartOptions{}); err != nil {
		return 0, 0, err
	}
	ran = time.Since(t0)
	ex, err := api.ExecCreate(ctx, res.ID, client.ExecCreateOptions{Cmd: []string{"echo", "x"}, AttachStdout: true, AttachStderr: true})
	if err != nil {
		return 0, 0, err
	}
	att, err := api.ExecAttach(ctx, ex.ID, client.ExecAttachOptions{})
	if err != nil {
		return 0, 0, err
	}
	out, err := io.ReadAll(att.Reader)
	att.Close()
	interactive = time.Since(t0)
	if err != nil || !strings.HasSuffix(string(out), "x\n") { // behind the stream's 8-byte frame header
		return 0, 0, errors.Join(err, fmt.Errorf("docker exec echo: %q", out))
	}
	return ran, interactive, nil
}

// removeTTIContainers removes what dockerInteractive made.
func removeTTIContainers(api *client.Client) error {
	ctx := context.Background()
	list, err := api.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: make(client.Filters).Add("label", ttiLabel+"=true")})
	if err != nil {
		return err
	}
	for _, c := range list.Items {
		if _, err := api.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true}); err != nil {
			return err
		}
	}
	return nil
}
