// Command bench measures corral's sandbox operations next to the nearest
// peer, in the same run on the same machine, and prints the ratios:
//
//   - docker: the Docker driver against the Docker Engine API called
//     directly, for create→ready, stop, start and delete, with the same
//     image and command;
//   - native: the native driver's create→ready against bwrap and unshare
//     running the same command in new namespaces, and a bare fork+exec of
//     it as the floor;
//   - images: the native driver's first (unpacking) and warm create of a
//     50 MB image against the engine's docker load + run of it;
//   - egress: HTTP GETs and a 1 GiB download through a sandbox's egress
//     proxy (CONNECT pass-through, inspected, plain HTTP) against the same
//     local server reached directly; no Docker, no root;
//   - tti: time to interactive, from the create call to the first exec
//     echo returning, on both drivers, sequential, staggered and burst,
//     beside docker run -d + docker exec and bwrap running the echo;
//   - gvisor: create→ready and time to interactive on the gVisor tier of
//     both drivers, beside docker run --runtime=runsc, the namespaces
//     tiers and docker run; the ratio to the namespaces tier is gVisor's
//     overhead;
//   - files: corral sandbox cp of a 1 GiB file and of 10,000 small files
//     in and out, on both drivers, against docker cp of the same data, with
//     the gateway's RSS growth during each copy;
//   - snapshots: a snapshot of a 1 GiB /sandbox, a restore of it and a fork
//     of 10 on the Docker driver, against docker commit, docker run of the
//     committed image and 10 of those at once; pause and resume on the
//     native driver against docker pause and unpause.
//
// Peer and corral runs are interleaved; warm-up runs are discarded.
//
//	go run ./bench [-driver docker|native|images|gvisor|files|snapshots|core|egress|tti|interfaces|all] [-n 20] [-warmup 2]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
	"github.com/corral-sandbox/corral/internal/testenv"
)

func main() {
	which := flag.String("driver", "all", "which benchmarks: "+strings.Join(benchmarks, ", ")+" (tti-native: tti without Docker: corral native, bwrap, the native pool)")
	n := flag.Int("n", 20, "measured runs per operation")
	warmup := flag.Int("warmup", 2, "runs discarded before measuring")
	quick := flag.Bool("quick", false, "a short run of everything (CI): 5 runs each, 1,000 records, 1 s of load")
	out := flag.String("out", "", "also write the report to this directory: report.md, report.json, latency-N.png")
	flag.Func("gateway-arg", "an extra argument for every gateway the benchmarks start (repeatable), e.g. --metrics-listen=127.0.0.1:9464 to profile it at /debug/pprof/",
		func(v string) error { gatewayArgs = append(gatewayArgs, v); return nil })
	flag.StringVar(&postgresServer, "postgres", os.Getenv("CORRAL_TEST_POSTGRES"), "core: a PostgreSQL server (URL of its maintenance database, as a superuser) to run the throughput on beside SQLite, in databases the bench makes (default $CORRAL_TEST_POSTGRES)")
	flag.IntVar(&onlyClients, "clients", 0, "core: measure only the journaled requests/s with this many clients, for 10 s (to profile the gateway meanwhile)")
	flag.Parse()
	if !slices.Contains(benchmarks, *which) {
		fmt.Fprintf(os.Stderr, "bench: -driver %q: no such benchmarks (there are %s)\n", *which, strings.Join(benchmarks, ", "))
		os.Exit(2)
	}
	if *quick {
		*n, *warmup = 5, 1
	}
	dir, err := os.MkdirTemp("", "corral-bench-")
	if err == nil {
		defer os.RemoveAll(dir)
		var r *report
		if r, err = run(dir, *which, *n, *warmup, *quick); err == nil && *out != "" {
			err = r.write(*out)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// benchmarks are the values of -driver.
var benchmarks = []string{"all", "docker", "native", "images", "gvisor", "files", "snapshots", "memory", "core", "egress", "tti", "tti-native", "interfaces"}

// report is everything one run measured.
type report struct {
	Machine string    `json:"machine"`
	Command string    `json:"command"`
	Runs    int       `json:"runs"`
	Warmup  int       `json:"warmup"`
	Tables  []*table  `json:"tables"`
	Scaling []*figure `json:"scaling,omitempty"`
	Core    []*figure `json:"core,omitempty"`
	Egress  []*figure `json:"egress,omitempty"`
	TTI     []*figure `json:"tti,omitempty"`
	GVisor  []*figure `json:"gvisor,omitempty"`
	Files   []*figure `json:"files,omitempty"`
	// Interfaces are the exec round trips through each interface.
	Interfaces []*figure `json:"interfaces,omitempty"`
}

func run(dir, which string, n, warmup int, quick bool) (*report, error) {
	var bin string
	if which != "egress" { // egress runs in this process
		var err error
		if bin, err = testenv.BuildCorralRelease(dir); err != nil { // what ships: no test switches
			return nil, err
		}
	}
	if which == "all" || which == "docker" || which == "tti" || which == "gvisor" || which == "snapshots" {
		// at once, rather than after minutes of retries: an engine, and its test image (made here when missing)
		if err := testenv.EnsureTestImage(context.Background()); err != nil {
			return nil, fmt.Errorf("docker: %w", err)
		}
	}
	r := &report{Machine: machine(), Command: "go run ./bench " + strings.Join(os.Args[1:], " "), Runs: n, Warmup: warmup}
	fmt.Printf("%s\n%d runs (after %d warm-up) of each operation, corral interleaved with its peers\n", r.Machine, n, warmup)
	for _, b := range []struct {
		name string
		fn   func(bin, home string, n, warmup int) (*table, error)
	}{{"docker", benchDocker}, {"native", benchNative}, {"images", benchImages}} {
		if which != "all" && which != b.name {
			continue
		}
		t, err := b.fn(bin, filepath.Join(dir, b.name), n, warmup)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", b.name, err)
		}
		fmt.Printf("\n%s\n", t.Title)
		if err := t.print(); err != nil {
			return nil, err
		}
		r.Tables = append(r.Tables, t)
	}
	if which == "all" || which == "gvisor" {
		t, err := benchGVisor(bin, filepath.Join(dir, "gvisor"), n, warmup)
		if err != nil {
			return nil, fmt.Errorf("gvisor: %w", err)
		}
		fmt.Printf("\n%s\n", t.Title)
		if err := t.print(); err != nil {
			return nil, err
		}
		r.Tables, r.GVisor = append(r.Tables, t), gvisorOverhead(t)
		if err := printFigures(gvisorTitle, r.GVisor); err != nil {
			return nil, err
		}
	}
	if which == "all" || which == "files" {
		fn, fw := n, warmup
		if quick || which == "all" {
			fn, fw = 1, 0 // a GiB a copy: one run is the measure
		}
		if quick {
			quickFiles()
		}
		t, figs, err := benchFiles(bin, filepath.Join(dir, "files"), fn, fw)
		if err != nil {
			return nil, fmt.Errorf("files: %w", err)
		}
		fmt.Printf("\n%s\n", t.Title)
		if err := t.print(); err != nil {
			return nil, err
		}
		r.Tables, r.Files = append(r.Tables, t), figs
		if err := printFigures(filesTitle, figs); err != nil {
			return nil, err
		}
	}
	if which == "all" || which == "snapshots" {
		sn, sw := min(n, 5), min(warmup, 1) // a GiB a run
		if quick {
			sn, sw = 1, 0
		}
		t, err := benchSnapshots(bin, filepath.Join(dir, "snapshots"), sn, sw)
		if err != nil {
			return nil, fmt.Errorf("snapshots: %w", err)
		}
		fmt.Printf("\n%s\n", t.Title)
		if err := t.print(); err != nil {
			return nil, err
		}
		r.Tables = append(r.Tables, t)
	}
	if which == "all" || which == "memory" {
		mn, mw := n, warmup
		if quick {
			mn, mw = 1, 0
		}
		t, err := benchMemory(bin, filepath.Join(dir, "memory"), mn, mw)
		if err != nil {
			return nil, fmt.Errorf("memory snapshots: %w", err)
		}
		fmt.Printf("\n%s\n", t.Title)
		if err := t.print(); err != nil {
			return nil, err
		}
		r.Tables = append(r.Tables, t)
	}
	var drivers []string
	for _, d := range []string{"docker", "native"} {
		if which == "all" || which == d {
			drivers = append(drivers, d)
		}
	}
	if len(drivers) > 0 {
		figs, err := benchScaling(bin, filepath.Join(dir, "scaling"), drivers, n, quick)
		if err != nil {
			return nil, fmt.Errorf("scaling: %w", err)
		}
		r.Scaling = figs
		if err := printFigures(scalingTitle, figs); err != nil {
			return nil, err
		}
	}
	if which == "all" || which == "core" {
		figs, err := benchCore(bin, filepath.Join(dir, "core"), quick)
		if err != nil {
			return nil, fmt.Errorf("core: %w", err)
		}
		r.Core = figs
		if err := printFigures(coreTitle, figs); err != nil {
			return nil, err
		}
	}
	if which == "all" || which == "tti" || which == "tti-native" {
		iterations := 100
		if quick {
			iterations = 10
		}
		t, figs, err := benchTTI(bin, filepath.Join(dir, "tti"), iterations, which == "tti-native")
		if err != nil {
			return nil, fmt.Errorf("tti: %w", err)
		}
		fmt.Printf("\n%s\n", t.Title)
		if err := t.print(); err != nil {
			return nil, err
		}
		r.Tables, r.TTI = append(r.Tables, t), figs
		if err := printFigures(ttiTitle, figs); err != nil {
			return nil, err
		}
	}
	if which == "all" || which == "interfaces" {
		t, figs, err := benchInterfaces(bin, filepath.Join(dir, "interfaces"), n, warmup)
		if err != nil {
			return nil, fmt.Errorf("interfaces: %w", err)
		}
		fmt.Printf("\n%s\n", t.Title)
		if err := t.print(); err != nil {
			return nil, err
		}
		r.Tables, r.Interfaces = append(r.Tables, t), figs
		if err := printFigures("interfaces: each within 1.5× + 2 ms of a direct gRPC call", figs); err != nil {
			return nil, err
		}
	}
	if which == "all" || which == "egress" {
		figs, err := benchEgress(quick)
		if err != nil {
			return nil, fmt.Errorf("egress: %w", err)
		}
		r.Egress = figs
		if err := printFigures(egressTitle, figs); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// The titles of the figure sections.
const (
	scalingTitle = "scaling: create→ready and create throughput by sandboxes already running"
	coreTitle    = "gateway core: fake driver, real SQLite store, every operation journaled"
	ttiTitle     = "time to interactive: min, p99 and success rate"
	gvisorTitle  = "the gVisor tier's overhead: p50 ratios"
	filesTitle   = "files: throughput of corral sandbox cp beside docker cp, and the gateway's memory"
)

func printFigures(title string, figs []*figure) error {
	fmt.Printf("\n%s\n", title)
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "measure\tvalue\tgoal\t")
	for _, f := range figs {
		fmt.Fprintf(tw, "%s\t%.4g %s\t%s\t\n", f.Name, f.Value, f.Unit, goalText(f))
	}
	return tw.Flush()
}

// goalText is a figure's goal and whether it was met.
func goalText(f *figure) string {
	switch {
	case f.Met == nil:
		return "-"
	case *f.Met:
		return f.Goal + " (met)"
	}
	return f.Goal + " (missed)"
}

// machine describes where the run happens.
func machine() string {
	host, _ := os.Hostname()
	cpu := "?"
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(line, "model name"); ok {
				cpu = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	var uts syscall.Utsname
	_ = syscall.Uname(&uts)
	return fmt.Sprintf("%s: %d CPUs (%s), Linux %s", host, runtime.NumCPU(), cpu, charsToString(uts.Release[:]))
}

func charsToString(cs []int8) string {
	b := make([]byte, 0, len(cs))
	for _, c := range cs {
		if c == 0 {
			break
		}
		b = append(b, byte(c))
	}
	return string(b)
}

// table is one benchmark's timings: per operation, corral's and each
// peer's.
type table struct {
	Title string   `json:"title"`
	Ops   []string `json:"operations"`
	Peers []string `json:"peers"` // the first is the one ratios are taken against
	// Times[op][who], who being "corral" or a peer
	Times map[string]map[string][]time.Duration `json:"times_ns"`
}

func newTable(title string, ops, peers []string) *table {
	t := &table{Title: title, Ops: ops, Peers: peers, Times: map[string]map[string][]time.Duration{}}
	for _, op := range ops {
		t.Times[op] = map[string][]time.Duration{}
	}
	return t
}

func (t *table) add(op, who string, d time.Duration) { t.Times[op][who] = append(t.Times[op][who], d) }

func (t *table) print() error {
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "operation\tcorral p50\tp95\tmax\t")
	for _, p := range t.Peers {
		fmt.Fprintf(tw, "%s p50\tp95\tmax\t", p)
	}
	fmt.Fprintf(tw, "ratio p50 vs %s\t\n", t.Peers[0])
	for _, op := range t.Ops {
		a := stats(t.Times[op]["corral"])
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t", op, ms(a[0]), ms(a[1]), ms(a[2]))
		for _, p := range t.Peers {
			if b := t.Times[op][p]; len(b) > 0 {
				s := stats(b)
				fmt.Fprintf(tw, "%s\t%s\t%s\t", ms(s[0]), ms(s[1]), ms(s[2]))
			} else {
				fmt.Fprint(tw, "-\t-\t-\t")
			}
		}
		if b := t.Times[op][t.Peers[0]]; len(b) > 0 {
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

// gatewayArgs are added to every gateway's command line (-gateway-arg).
var gatewayArgs []string

// startGateway runs `corral gateway` on home with args and waits until its
// API answers.
func startGateway(bin, home string, args ...string) (*gateway, error) {
	all := append([]string{"--home", home, "gateway", "--sandbox-label", "corral.bench", "--log-level", "warn"}, args...)
	all = append(all, gatewayArgs...)
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
