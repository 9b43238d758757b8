package main

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
	"github.com/corral-sandbox/corral/internal/caller"
	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/driver/fake"
	"github.com/corral-sandbox/corral/internal/driver/fake/faults"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/store/sqlite"
	"github.com/corral-sandbox/corral/internal/testenv"
)

// figure is one measurement of the gateway's own path, with its goal.
type figure struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	Unit  string  `json:"unit"`
	Goal  string  `json:"goal,omitempty"`
	Met   *bool   `json:"met,omitempty"` // nil: no goal
}

// onlyClients, when set (-clients), limits the core benchmark to the
// throughput with that many clients.
var onlyClients int

// postgresServer, when set (-postgres), is a PostgreSQL server the core
// benchmark makes a database on for each throughput run on PostgreSQL.
var postgresServer string

// recoveredLine is what the gateway logs once recovery has compared every
// sandbox with the driver.
const recoveredLine = "every sandbox compared with the driver after recovery"

// benchCore measures the gateway on the fake driver, with the real SQLite
// store and every operation journaled: request throughput by concurrent
// clients, recovery time, memory and store size by record count, and
// SIGTERM-to-exit time.
func benchCore(bin, dir string, quick bool) ([]*figure, error) {
	var figs []*figure
	add := func(name string, v float64, unit, goal string, met func(float64) bool) {
		f := &figure{Name: name, Value: v, Unit: unit, Goal: goal}
		if met != nil {
			ok := met(v)
			f.Met = &ok
		}
		figs = append(figs, f)
	}
	atLeast := func(n float64) func(float64) bool { return func(v float64) bool { return v >= n } }
	atMost := func(n float64) func(float64) bool { return func(v float64) bool { return v <= n } }

	run := 5 * time.Second
	counts := []int{1000, 10000}
	if quick {
		run, counts = time.Second, []int{1000}
	}
	clientCounts := []int{1, 8, 64}
	if onlyClients > 0 {
		run, clientCounts = 10*time.Second, []int{onlyClients}
	}
	for _, clients := range clientCounts {
		ops, err := throughput(bin, filepath.Join(dir, fmt.Sprintf("tput-%d", clients)), clients, run)
		if err != nil {
			return nil, fmt.Errorf("throughput with %d clients: %w", clients, err)
		}
		name := fmt.Sprintf("journaled requests/s, %d clients", clients)
		if goal, ok := throughputGoals[clients]; ok {
			add(name, ops, "ops/s", fmt.Sprintf("≥ %d", goal), atLeast(float64(goal)))
		} else {
			add(name, ops, "ops/s", "", nil)
		}
		if postgresServer == "" {
			continue
		}
		url, err := newDatabase(postgresServer, fmt.Sprintf("corral_bench_%d", clients))
		if err != nil {
			return nil, fmt.Errorf("PostgreSQL: %w", err)
		}
		pg, err := throughput(bin, filepath.Join(dir, fmt.Sprintf("tput-pg-%d", clients)), clients, run, "--store", url)
		if err != nil {
			return nil, fmt.Errorf("throughput with %d clients on PostgreSQL: %w", clients, err)
		}
		add(fmt.Sprintf("journaled requests/s, %d clients, PostgreSQL store", clients), pg, "ops/s", "", nil)
		add(fmt.Sprintf("PostgreSQL / SQLite, %d clients", clients), pg/ops, "×", "", nil)
	}
	if onlyClients > 0 {
		return figs, nil
	}
	if postgresServer != "" {
		url, err := newDatabase(postgresServer, "corral_bench_replicas")
		if err != nil {
			return nil, fmt.Errorf("PostgreSQL: %w", err)
		}
		n := 40
		if quick {
			n = 10
		}
		leader, standby, err := replicasCreate(bin, filepath.Join(dir, "replicas"), url, n)
		if err != nil {
			return nil, fmt.Errorf("replicas: %w", err)
		}
		add("create→ready through the leader, two replicas at once, p50", millis(p50(leader)), "ms", "", nil)
		add("create→ready through the standby (forwarded), two replicas at once, p50", millis(p50(standby)), "ms", "", nil)
		add("standby / leader, create→ready", float64(p50(standby))/float64(p50(leader)), "×", "", nil)
	}
	for _, n := range counts {
		took, rss, size, err := recovery(bin, filepath.Join(dir, fmt.Sprintf("recover-%d", n)), n)
		if err != nil {
			return nil, fmt.Errorf("recovery of %d records: %w", n, err)
		}
		var met func(float64) bool
		goal := ""
		if n == 1000 {
			goal, met = "≤ 1 s", atMost(1)
		}
		add(fmt.Sprintf("restart to every record reconciled, %d records", n), took.Seconds(), "s", goal, met)
		goal, met = "", nil
		if n == 10000 {
			goal, met = "≤ 100 MB", atMost(100)
		}
		add(fmt.Sprintf("gateway RSS after recovery, %d records", n), rss, "MB", goal, met)
		add(fmt.Sprintf("store size, %d records", n), size, "MB", "", nil)
	}
	idle, held, err := sigtermExit(bin, filepath.Join(dir, "sigterm"))
	if err != nil {
		return nil, fmt.Errorf("SIGTERM: %w", err)
	}
	add("SIGTERM to exit, nothing in flight", float64(idle.Microseconds())/1000, "ms", "≤ 100 ms", atMost(100))
	add("SIGTERM to exit, from the release of a held driver call", float64(held.Microseconds())/1000, "ms", "", nil)
	return figs, nil
}

// throughputGoals are the journaled requests/s to reach, by client count.
var throughputGoals = map[int]int{8: 2000, 64: 4000}

// throughput runs clients that create, stop, start and delete sandboxes
// (each request journaled) for d, and returns requests per second.
func throughput(bin, home string, clients int, d time.Duration, args ...string) (float64, error) {
	g, err := startGateway(bin, home, append([]string{"--driver", "fake"}, args...)...)
	if err != nil {
		return 0, err
	}
	defer g.close()
	var ops atomic.Int64
	var failure atomic.Value
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	for w := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			for i := 0; time.Now().Before(deadline); i++ {
				name := fmt.Sprintf("t%d-%d", w, i)
				steps := []func() error{
					func() error {
						_, err := g.api.CreateSandbox(ctx, &corralv1.CreateSandboxRequest{Name: name, Spec: &corralv1.SandboxSpec{Command: []string{"sleep", "1"}}})
						return err
					},
					func() error { return g.stop(name) },
					func() error { return g.start(name) },
					func() error { return g.remove(name) },
				}
				for _, step := range steps {
					if err := step(); err != nil {
						failure.Store(err)
						return
					}
					ops.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if err, ok := failure.Load().(error); ok {
		return 0, err
	}
	return float64(ops.Load()) / d.Seconds(), nil
}

// newDatabase makes an empty database name on the PostgreSQL server
// (dropping one of that name) and returns its URL.
func newDatabase(server, name string) (string, error) {
	db, err := sql.Open("pgx", server)
	if err != nil {
		return "", err
	}
	defer db.Close()
	for _, stmt := range []string{"DROP DATABASE IF EXISTS " + name + " WITH (FORCE)", "CREATE DATABASE " + name} {
		if _, err := db.Exec(stmt); err != nil {
			return "", fmt.Errorf("%s: %w", stmt, err)
		}
	}
	u, err := url.Parse(server)
	if err != nil {
		return "", err
	}
	u.Path = "/" + name
	return u.String(), nil
}

// recovery seeds n ready sandboxes (records in the store, running objects
// in the fake driver), and times a gateway from its start until it has
// compared every record with the driver; it returns that time, the
// gateway's RSS then (MB), and the store's size (MB).
func recovery(bin, home string, n int) (time.Duration, float64, float64, error) {
	if err := seed(home, n); err != nil {
		return 0, 0, 0, err
	}
	size := fileMB(filepath.Join(home, "corral.db")) + fileMB(filepath.Join(home, "corral.db-wal"))
	cmd := exec.Command(bin, append([]string{"--home", home, "gateway", "--driver", "fake", "--sandbox-label", "corral.bench", "--log-level", "info"}, gatewayArgs...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return 0, 0, 0, err
	}
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, 0, 0, err
	}
	defer func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() }()
	lines := bufio.NewScanner(stderr)
	for lines.Scan() {
		if strings.Contains(lines.Text(), recoveredLine) {
			took := time.Since(t0)
			go func() { // keep the pipe drained
				for lines.Scan() {
				}
			}()
			return took, rssMB(cmd.Process.Pid), size, nil
		}
	}
	return 0, 0, 0, fmt.Errorf("the gateway exited without logging %q", recoveredLine)
}

// seed writes n ready sandboxes into a home: records (with their settled
// create requests) through the store, objects through the fake driver.
func seed(home string, n int) error {
	if err := os.MkdirAll(home, 0o700); err != nil {
		return err
	}
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(home, "corral.db"))
	if err != nil {
		return err
	}
	defer st.Close()
	now := time.Now()
	specs := make([]driver.Spec, 0, n)
	for i := range n {
		sb := &sandbox.Sandbox{ID: sandbox.NewID(), Name: "r" + strconv.Itoa(i), Tenant: caller.DefaultTenant,
			Spec:    sandbox.Spec{Command: []string{"sleep", "1"}, RestartPolicy: sandbox.RestartOnFailure, MaxRestarts: sandbox.DefaultMaxRestarts},
			Desired: sandbox.DesiredRunning, Phase: sandbox.PhaseReady, Generation: 1,
			CreatedAt: now, UpdatedAt: now, Deadline: now.Add(5 * time.Minute)}
		req := &sandbox.Operation{SandboxID: sb.ID, Kind: sandbox.OpCreate, State: sandbox.OpSucceeded, Owner: "bench",
			Generation: 1, StartedAt: now, Deadline: now.Add(time.Minute), FinishedAt: now}
		if _, _, err := st.CreateSandbox(ctx, sb, req); err != nil {
			return err
		}
		specs = append(specs, driver.Spec{ID: sb.ID, Name: sb.Name, Generation: 1})
	}
	return fake.Seed(filepath.Join(home, "fake"), "corral.bench", specs)
}

// sigtermExit times a gateway's exit after SIGTERM with nothing in
// flight, and after the release of a driver call it had to wait for (held
// by the fake driver's fault rules, which only a test build obeys).
func sigtermExit(bin, home string) (idle, held time.Duration, err error) {
	g, err := startGateway(bin, home, "--driver", "fake")
	if err != nil {
		return 0, 0, err
	}
	t0 := time.Now()
	_ = g.cmd.Process.Signal(syscall.SIGTERM)
	_ = g.cmd.Wait()
	idle = time.Since(t0)
	g.conn.Close()

	state := filepath.Join(home, "fake")
	if err := faults.Set(state, faults.Rule{Op: "create", Action: "hold"}); err != nil {
		return 0, 0, err
	}
	if err := os.MkdirAll(filepath.Join(home, "test-build"), 0o755); err != nil {
		return 0, 0, err
	}
	tagged, err := testenv.BuildCorral(filepath.Join(home, "test-build"))
	if err != nil {
		return 0, 0, err
	}
	g, err = startGateway(tagged, home, "--driver", "fake")
	if err != nil {
		return 0, 0, err
	}
	defer g.conn.Close()
	resp, err := g.api.CreateSandbox(context.Background(), &corralv1.CreateSandboxRequest{Name: "held", Spec: &corralv1.SandboxSpec{Command: []string{"sleep", "1"}}})
	if err != nil {
		return 0, 0, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := faults.WaitHeld(ctx, state, "create", resp.Sandbox.Id); err != nil {
		return 0, 0, err
	}
	_ = g.cmd.Process.Signal(syscall.SIGTERM)
	time.Sleep(200 * time.Millisecond) // the shutdown now waits for the call
	t0 = time.Now()
	if err := faults.Set(state); err != nil {
		return 0, 0, err
	}
	_ = g.cmd.Wait()
	return idle, time.Since(t0), nil
}

func fileMB(path string) float64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return float64(fi.Size()) / (1 << 20)
}

// rssMB is a process's resident set size in MB.
func rssMB(pid int) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}
