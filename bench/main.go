// Command bench measures corral's sandbox operations next to the nearest
// peer, in the same run on the same machine, and prints the ratios:
//
//   - docker: the Docker driver against the Docker Engine API called
//     directly, for create→ready, stop, start and delete, with the same
//     image and command;
//   - native: the native driver's create→ready against bwrap and unshare
//     running the same command in new namespaces, and a bare fork+exec of
//     it as the floor.
//
// Peer and corral runs are interleaved; warm-up runs are discarded.
//
//	go run ./bench [-driver docker|native|all] [-n 20] [-warmup 2]
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

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
	"github.com/corral-sandbox/corral/internal/testenv"
)

func main() {
	drv := flag.String("driver", "all", "which benchmark: docker, native or all")
	n := flag.Int("n", 20, "measured runs per operation")
	warmup := flag.Int("warmup", 2, "runs discarded before measuring")
	flag.Parse()
	dir, err := os.MkdirTemp("", "corral-bench-")
	if err == nil {
		defer os.RemoveAll(dir)
		err = run(dir, *drv, *n, *warmup)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(dir, drv string, n, warmup int) error {
	bin, err := testenv.BuildCorral(dir)
	if err != nil {
		return err
	}
	host, _ := os.Hostname()
	for _, b := range []struct {
		name string
		fn   func(bin, home string, n, warmup int) (*table, error)
	}{{"docker", benchDocker}, {"native", benchNative}} {
		if drv != "all" && drv != b.name {
			continue
		}
		t, err := b.fn(bin, filepath.Join(dir, b.name), n, warmup)
		if err != nil {
			return fmt.Errorf("%s: %w", b.name, err)
		}
		fmt.Printf("\n%s, %d runs (after %d warm-up), interleaved, on %s\n", t.title, n, warmup, host)
		if err := t.print(); err != nil {
			return err
		}
	}
	return nil
}

// table is one benchmark's timings: per operation, corral's and each
// peer's.
type table struct {
	title string
	ops   []string
	peers []string // the first is the one ratios are taken against
	// times[op][who], who being "corral" or a peer
	times map[string]map[string][]time.Duration
}

func newTable(title string, ops, peers []string) *table {
	t := &table{title: title, ops: ops, peers: peers, times: map[string]map[string][]time.Duration{}}
	for _, op := range ops {
		t.times[op] = map[string][]time.Duration{}
	}
	return t
}

func (t *table) add(op, who string, d time.Duration) { t.times[op][who] = append(t.times[op][who], d) }

func (t *table) print() error {
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "operation\tcorral p50\tp95\tmax\t")
	for _, p := range t.peers {
		fmt.Fprintf(tw, "%s p50\tp95\tmax\t", p)
	}
	fmt.Fprintf(tw, "ratio p50 vs %s\t\n", t.peers[0])
	for _, op := range t.ops {
		a := stats(t.times[op]["corral"])
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t", op, ms(a[0]), ms(a[1]), ms(a[2]))
		for _, p := range t.peers {
			if b := t.times[op][p]; len(b) > 0 {
				s := stats(b)
				fmt.Fprintf(tw, "%s\t%s\t%s\t", ms(s[0]), ms(s[1]), ms(s[2]))
			} else {
				fmt.Fprint(tw, "-\t-\t-\t")
			}
		}
		if b := t.times[op][t.peers[0]]; len(b) > 0 {
			fmt.Fprintf(tw, "%.2f×\t\n", float64(a[0])/float64(stats(b)[0]))
		} else {
			fmt.Fprint(tw, "-\t\n")
		}
	}
	return tw.Flush()
}

// gateway is a corral gateway run for a benchmark.
type gateway struct {
	cmd  *exec.Cmd
	conn *grpc.ClientConn
	api  corralv1.SandboxServiceClient
}

// startGateway runs `corral gateway` on home with args and waits until its
// API answers.
func startGateway(bin, home string, args ...string) (*gateway, error) {
	all := append([]string{"--home", home, "gateway", "--sandbox-label", "corral.bench", "--log-level", "warn"}, args...)
	g := &gateway{cmd: exec.Command(bin, all...)}
	g.cmd.Stderr = os.Stderr
	if err := g.cmd.Start(); err != nil {
		return nil, err
	}
	var err error
	g.conn, err = grpc.NewClient("unix://"+filepath.Join(home, "corral.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		g.close()
		return nil, err
	}
	g.api = corralv1.NewSandboxServiceClient(g.conn)
	for range 300 {
		if _, err := g.api.ListSandboxes(context.Background(), &corralv1.ListSandboxesRequest{}); err == nil {
			return g, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	g.close()
	return nil, fmt.Errorf("the gateway did not answer")
}

func (g *gateway) close() {
	if g.conn != nil {
		g.conn.Close()
	}
	_ = g.cmd.Process.Signal(syscall.SIGTERM)
	_ = g.cmd.Wait()
}

// create times a create until the sandbox is ready (its main process runs).
func (g *gateway) create(name string, spec *corralv1.SandboxSpec) (time.Duration, error) {
	t0 := time.Now()
	if _, err := g.api.CreateSandbox(context.Background(), &corralv1.CreateSandboxRequest{Name: name, Spec: spec}); err != nil {
		return 0, err
	}
	err := g.waitPhase(name, "ready")
	return time.Since(t0), err
}

// timed times a request until the sandbox reaches phase ("" = deleted).
func (g *gateway) timed(name, phase string, call func() error) (time.Duration, error) {
	t0 := time.Now()
	if err := call(); err != nil {
		return 0, err
	}
	err := g.waitPhase(name, phase)
	return time.Since(t0), err
}

func (g *gateway) stop(name string) error {
	_, err := g.api.StopSandbox(context.Background(), &corralv1.StopSandboxRequest{Name: name})
	return err
}

func (g *gateway) start(name string) error {
	_, err := g.api.StartSandbox(context.Background(), &corralv1.StartSandboxRequest{Name: name})
	return err
}

// remove deletes with --force, as a peer's remove with force: no graceful
// stop.
func (g *gateway) remove(name string) error {
	_, err := g.api.DeleteSandbox(context.Background(), &corralv1.DeleteSandboxRequest{Name: name, Force: true})
	return err
}

// waitPhase follows the sandbox until it is in phase ("" = deleted).
func (g *gateway) waitPhase(name, phase string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stream, err := g.api.WatchSandboxes(ctx, &corralv1.WatchSandboxesRequest{Name: name})
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
		case ev.Sandbox != nil && ev.Sandbox.Phase == "error":
			return fmt.Errorf("sandbox %s: %s", name, ev.Sandbox.Reason)
		case ev.Sandbox != nil:
			seen = true
		}
	}
}

// cycle times create→ready, stop, start and delete --force of one sandbox,
// each until the record shows it done (ready means the main process runs).
func (g *gateway) cycle(name string, command []string) ([]time.Duration, error) {
	created, err := g.create(name, &corralv1.SandboxSpec{Command: command})
	if err != nil {
		return nil, err
	}
	out := []time.Duration{created}
	for _, s := range []struct {
		phase string
		call  func(string) error
	}{{"stopped", g.stop}, {"ready", g.start}, {"", g.remove}} {
		d, err := g.timed(name, s.phase, func() error { return s.call(name) })
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

// cycleOps are the operations of cycle, in order.
var cycleOps = []string{"create→ready", "stop", "start", "delete --force"}

// stats returns p50, p95 and max.
func stats(d []time.Duration) [3]time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	at := func(q float64) time.Duration { return s[min(len(s)-1, int(q*float64(len(s))))] }
	return [3]time.Duration{at(0.5), at(0.95), s[len(s)-1]}
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d.Microseconds())/1000) }
