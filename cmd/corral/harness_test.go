package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/driver/fake"
	"github.com/corral-sandbox/corral/internal/driver/fake/faults"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/store/sqlite"
	"github.com/corral-sandbox/corral/internal/testenv"
)

// bin is the corral binary under test, built once by TestMain.
var bin string

func TestMain(m *testing.M) { testenv.MainWithCorral(m, &bin) }

// watchDeletes reports on the returned channel if the named sandbox is
// ever deleted while the test runs.
func watchDeletes(t *testing.T, home, name string) <-chan bool {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stream, err := api(t, home).WatchSandboxes(ctx, &corralv1.WatchSandboxesRequest{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	deleted := make(chan bool, 1)
	go func() {
		for {
			ev, err := stream.Recv()
			if err != nil {
				return
			}
			if ev.Type == "DELETED" {
				deleted <- true
				return
			}
		}
	}()
	return deleted
}

// gatewayProc is a corral gateway running as a child process.
type gatewayProc struct {
	t    *testing.T
	home string
	cmd  *exec.Cmd
	logs *testenv.SyncBuffer
	done chan struct{}
	err  error
}

// launch starts a gateway on home without waiting for it.
func launch(t *testing.T, home string, args ...string) *gatewayProc {
	t.Helper()
	g := &gatewayProc{t: t, home: home, logs: &testenv.SyncBuffer{}, done: make(chan struct{})}
	all := []string{"--home", home, "gateway", "--log-level", "debug"}
	if !slices.Contains(args, "--driver") {
		all = append(all, "--driver", "fake")
	}
	all = append(all, args...)
	g.cmd = exec.Command(bin, all...)
	g.cmd.Stdout, g.cmd.Stderr = g.logs, g.logs
	if err := g.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { g.err = g.cmd.Wait(); close(g.done) }()
	t.Cleanup(func() {
		select {
		case <-g.done:
		default:
			g.cmd.Process.Kill()
			<-g.done
		}
		if t.Failed() {
			t.Logf("gateway log:\n%s", g.logs.String())
		}
	})
	return g
}

// startGateway starts a gateway and waits until its API answers.
func startGateway(t *testing.T, home string, args ...string) *gatewayProc {
	t.Helper()
	g := launch(t, home, args...)
	err := testenv.Until(30*time.Second, func() error {
		select {
		case <-g.done:
			t.Fatalf("gateway exited early: %v\n%s", g.err, g.logs.String())
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := api(t, home).ListSandboxes(ctx, &corralv1.ListSandboxesRequest{})
		return err
	})
	if err != nil {
		t.Fatalf("gateway did not answer: %v\n%s", err, g.logs.String())
	}
	return g
}

func (g *gatewayProc) signal(sig syscall.Signal) {
	g.t.Helper()
	if err := g.cmd.Process.Signal(sig); err != nil {
		g.t.Fatal(err)
	}
}

// exitCode waits for the gateway to exit (bounded, to fail rather than hang).
func (g *gatewayProc) exitCode(limit time.Duration) int {
	g.t.Helper()
	select {
	case <-g.done:
	case <-time.After(limit):
		g.t.Fatalf("gateway still running after %s\n%s", limit, g.logs.String())
	}
	return g.cmd.ProcessState.ExitCode()
}

func (g *gatewayProc) exited() bool {
	select {
	case <-g.done:
		return true
	default:
		return false
	}
}

// api returns an API client on the gateway socket of home.
func api(t *testing.T, home string) corralv1.SandboxServiceClient {
	t.Helper()
	return corralv1.NewSandboxServiceClient(apiConn(t, home))
}

// apiConn is a connection to the gateway of home, closed at the test's end.
func apiConn(t *testing.T, home string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+filepath.Join(home, "corral.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// corral runs the CLI on the gateway of home and returns its stdout,
// stderr and exit code.
func corral(t *testing.T, home string, args ...string) (string, string, int) {
	t.Helper()
	return corralEnv(t, nil, append([]string{"--home", home}, args...)...)
}

// corralEnv runs the CLI with extra environment variables.
func corralEnv(t *testing.T, env []string, args ...string) (string, string, int) {
	t.Helper()
	return corralRun(t, env, nil, args...)
}

// corralRun runs the CLI with extra environment variables and stdin.
func corralRun(t *testing.T, env []string, stdin io.Reader, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("corral %s: hung", strings.Join(args, " "))
	}
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatal(err)
	}
	return stdout.String(), stderr.String(), cmd.ProcessState.ExitCode()
}

// mustCorral runs the CLI and fails the test unless it exits 0.
func mustCorral(t *testing.T, home string, args ...string) string {
	t.Helper()
	out, errOut, code := corral(t, home, args...)
	if code != 0 {
		t.Fatalf("corral %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

// mustCorralEnv runs the CLI with extra environment variables and fails
// the test unless it exits 0.
func mustCorralEnv(t *testing.T, env []string, args ...string) string {
	t.Helper()
	out, errOut, code := corralEnv(t, env, args...)
	if code != 0 {
		t.Fatalf("corral %s: exit %d %s%s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

// startKeepsWorkdir starts a stopped sandbox that wrote "kept" to
// /sandbox/file, and checks that the new generation has it.
func startKeepsWorkdir(t *testing.T, home, name string) {
	t.Helper()
	mustCorral(t, home, "sandbox", "start", name)
	if v := getJSON(t, home, name); v["phase"] != "ready" || v["generation"] != 2.0 {
		t.Fatalf("after start: %v", v)
	}
	if out := mustCorral(t, home, "sandbox", "exec", name, "--", "cat", "/sandbox/file"); out != "kept\n" {
		t.Fatalf("the workdir did not survive stop/start: %q", out)
	}
}

func stateDir(home string) string { return filepath.Join(home, "fake") }

func setFaults(t *testing.T, home string, rules ...faults.Rule) {
	t.Helper()
	if err := faults.Set(stateDir(home), rules...); err != nil {
		t.Fatal(err)
	}
}

func waitHeld(t *testing.T, home, op, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := faults.WaitHeld(ctx, stateDir(home), op, id); err != nil {
		t.Fatal(err)
	}
}

// openStore opens a stopped gateway's store.
func openStore(t *testing.T, home string) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(home, "corral.db"))
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// openStoreLive opens the store of a running gateway, read-mostly (WAL
// lets a reader in beside the gateway's writer).
func openStoreLive(t *testing.T, home string) *sqlite.Store {
	t.Helper()
	st := openStore(t, home)
	t.Cleanup(func() { st.Close() })
	return st
}

// journal reads the journal of a stopped gateway's store directly.
func journal(t *testing.T, home string) []*sandbox.Operation {
	t.Helper()
	st := openStore(t, home)
	defer st.Close()
	if err := st.IntegrityCheck(context.Background()); err != nil {
		t.Fatalf("integrity check: %v", err)
	}
	list, err := st.ListSandboxes(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	var all []*sandbox.Operation
	for _, sb := range list {
		ops, err := st.ListOperations(context.Background(), sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, ops...)
	}
	return all
}

func assertNothingPending(t *testing.T, ops []*sandbox.Operation) {
	t.Helper()
	for _, op := range ops {
		if op.State == sandbox.OpPending {
			t.Errorf("journal entry %d (%s of %s) left pending", op.ID, op.Kind, op.SandboxID)
		}
	}
}

// waitPhase polls the API until the sandbox is in phase and its intent.
func waitPhase(t *testing.T, c corralv1.SandboxServiceClient, name, phase string) *corralv1.Sandbox {
	t.Helper()
	var sb *corralv1.Sandbox
	testenv.Eventually(t, 30*time.Second, func() error {
		var err error
		sb, err = c.GetSandbox(context.Background(), &corralv1.GetSandboxRequest{Name: name})
		if err == nil && sb.Phase != phase {
			err = fmt.Errorf("sandbox %s is %s, not %s: %v", name, sb.Phase, phase, sb)
		}
		return err
	})
	return sb
}

// emptyThroughAPI deletes every sandbox through the API and waits until
// the list is empty.
func emptyThroughAPI(t *testing.T, c corralv1.SandboxServiceClient) {
	t.Helper()
	ctx := context.Background()
	list, err := c.ListSandboxes(ctx, &corralv1.ListSandboxesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, sb := range list.Sandboxes {
		if _, err := c.DeleteSandbox(ctx, &corralv1.DeleteSandboxRequest{Name: sb.Id}); err != nil {
			t.Fatalf("delete %s: %v", sb.Name, err)
		}
	}
	testenv.Eventually(t, 60*time.Second, func() error {
		list, err := c.ListSandboxes(ctx, &corralv1.ListSandboxesRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Sandboxes) > 0 {
			return fmt.Errorf("%d sandboxes left, first %v", len(list.Sandboxes), list.Sandboxes[0])
		}
		return nil
	})
}

// fakeObjects lists the fake driver's objects of a home, as the driver sees them.
func fakeObjects(t *testing.T, home string) []driver.Object {
	t.Helper()
	d, err := fake.New(driver.Config{Label: "corral.managed", StateDir: stateDir(home)}, fake.Options{})
	if err != nil {
		t.Fatal(err)
	}
	list, err := d.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return list
}

// homeFor makes a directory anyone may enter holding a copy of the corral
// binary and a private home owned by uid, for a gateway run as that user.
func homeFor(t *testing.T, prefix string, uid int) (dir, home string) {
	t.Helper()
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	home = filepath.Join(dir, "home")
	data, err := os.ReadFile(bin)
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, "corral"), data, 0o755)
	}
	if err == nil {
		err = os.Chmod(dir, 0o755)
	}
	if err == nil {
		err = os.Mkdir(home, 0o700)
	}
	if err == nil {
		err = os.Chown(home, uid, uid)
	}
	if err != nil {
		t.Fatal(err)
	}
	return dir, home
}
