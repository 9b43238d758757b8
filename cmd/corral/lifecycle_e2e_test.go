package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/driver/fake"
	"github.com/corral-sandbox/corral/internal/driver/fake/faults"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

func TestCLIWalkthrough(t *testing.T) {
	home := t.TempDir()
	startGateway(t, home)
	id := strings.TrimSpace(mustCorral(t, home, "sandbox", "create", "--name", "demo", "--label", "team=a", "--", "sleep", "1d"))
	if len(id) != 32 {
		t.Fatalf("create printed %q, want the sandbox id", id)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(mustCorral(t, home, "sandbox", "get", "demo", "-o", "json")), &got); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"id", "name", "phase", "desired_state", "generation", "reason", "created_at", "last_operation"} {
		if _, ok := got[k]; !ok {
			t.Errorf("get -o json lacks %q", k)
		}
	}
	if got["id"] != id || got["phase"] != "ready" || got["desired_state"] != "running" || got["generation"] != 1.0 {
		t.Fatalf("get -o json = %v", got)
	}
	last, _ := got["last_operation"].(map[string]any)
	for _, k := range []string{"kind", "state", "started_at", "deadline"} {
		if last[k] == nil || last[k] == "" {
			t.Errorf("last_operation lacks %q: %v", k, last)
		}
	}
	if !strings.Contains(mustCorral(t, home, "sandbox", "get", "demo", "-o", "yaml"), "desired_state: running") {
		t.Error("get -o yaml lacks desired_state")
	}
	mustCorral(t, home, "sandbox", "stop", "demo")
	if out := mustCorral(t, home, "sandbox", "list"); !strings.Contains(out, "stopped") {
		t.Fatalf("list after stop:\n%s", out)
	}
	mustCorral(t, home, "sandbox", "start", "demo")
	out := mustCorral(t, home, "sandbox", "get", "demo")
	if !strings.Contains(out, "ready") || !strings.Contains(out, "2") {
		t.Fatalf("get after start:\n%s", out)
	}
	hist := mustCorral(t, home, "sandbox", "history", "demo")
	for _, k := range []string{"create", "driver.create", "driver.start", "stop", "driver.stop", "start"} {
		if !strings.Contains(hist, k) {
			t.Errorf("history lacks %s:\n%s", k, hist)
		}
	}
	if strings.Contains(hist, "pending") {
		t.Errorf("history has pending entries:\n%s", hist)
	}
	mustCorral(t, home, "sandbox", "delete", "demo")
	_, errOut, code := corral(t, home, "sandbox", "get", "demo")
	if code != 1 || !strings.Contains(errOut, `sandbox "demo" not found`) {
		t.Fatalf("get after delete: exit %d, %q", code, errOut)
	}
	if objs := fakeObjects(t, home); len(objs) != 0 {
		t.Fatalf("driver objects left: %v", objs)
	}
}

// 1,000 alternating stop/start requests, some concurrent: the sandbox is
// never deleted.
func TestStopStartStormNeverDeletes(t *testing.T) {
	home := t.TempDir()
	startGateway(t, home)
	c := api(t, home)
	ctx := context.Background()
	resp, err := c.CreateSandbox(ctx, &corralv1.CreateSandboxRequest{Name: "storm"})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.Sandbox.Id
	deleted := watchDeletes(t, home, "storm")

	send := func(i int) error {
		var err error
		if i%2 == 0 {
			_, err = c.StopSandbox(ctx, &corralv1.StopSandboxRequest{Name: "storm"})
		} else {
			_, err = c.StartSandbox(ctx, &corralv1.StartSandboxRequest{Name: "storm"})
		}
		return err
	}
	// 600 sequential, then 396 from four concurrent clients, then the last
	// four in order, so the last request is well defined: a stop.
	for i := range 600 {
		if err := send(i); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 99 {
				if err := send(w + i); err != nil {
					t.Errorf("concurrent request: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	for i := 1; i <= 4; i++ { // start, stop, start, stop
		if err := send(i); err != nil {
			t.Fatal(err)
		}
	}
	sb := waitPhase(t, c, "storm", "stopped")
	if sb.Id != id || sb.DesiredState != "stopped" {
		t.Fatalf("final record %v", sb)
	}
	select {
	case <-deleted:
		t.Fatal("the sandbox was deleted during the storm")
	default:
	}
	ops, err := c.ListOperations(ctx, &corralv1.ListOperationsRequest{Name: "storm"})
	if err != nil {
		t.Fatal(err)
	}
	requests := 0
	for _, op := range ops.Operations {
		if op.State == "pending" {
			t.Errorf("entry %d %s still pending", op.Id, op.Kind)
		}
		if !strings.HasPrefix(op.Kind, "driver.") {
			requests++
		}
	}
	if requests < 500 {
		t.Errorf("only %d request entries journaled for 1,000 requests", requests)
	}
	objs := fakeObjects(t, home)
	// The last start may have been overtaken by the stop before its new
	// incarnation was created: then the old one rests, stopped.
	if len(objs) != 1 || objs[0].ID != id || objs[0].State == driver.StateRunning || objs[0].Generation > sb.Generation {
		t.Fatalf("driver objects = %+v, want one object (generation at most %d) for %s, not running", objs, sb.Generation, id)
	}
	emptyThroughAPI(t, c)
}

// The caller disconnects, then SIGTERM: the gateway waits for
// the held call, records it and exits 0.
func TestCallerGoneThenSIGTERMDrainsHeldCall(t *testing.T) {
	home := t.TempDir()
	g := startGateway(t, home, "--shutdown-timeout", "60s")
	setFaults(t, home, faults.Rule{Op: "create", Action: "hold"})
	caller := exec.Command(bin, "--home", home, "sandbox", "create", "--name", "held")
	if err := caller.Start(); err != nil {
		t.Fatal(err)
	}
	sb := waitPhase(t, api(t, home), "held", "provisioning")
	waitHeld(t, home, "create", sb.Id)
	caller.Process.Kill() // the caller disconnects mid-call
	caller.Wait()
	g.signal(syscall.SIGTERM)
	time.Sleep(300 * time.Millisecond) // not a timing assertion: the budget is 60s
	if g.exited() {
		t.Fatalf("gateway exited with a driver call held:\n%s", g.logs.String())
	}
	setFaults(t, home) // release
	if code := g.exitCode(30 * time.Second); code != 0 {
		t.Fatalf("gateway exit code %d\n%s", code, g.logs.String())
	}
	ops := journal(t, home)
	assertNothingPending(t, ops)
	var create *sandbox.Operation
	for _, op := range ops {
		if op.Kind == sandbox.OpDriverCreate {
			create = op
		}
	}
	if create == nil || create.State != sandbox.OpSucceeded {
		t.Fatalf("driver.create entry = %+v, want succeeded", create)
	}
	startGateway(t, home)
	c := api(t, home)
	waitPhase(t, c, "held", "ready")
	emptyThroughAPI(t, c)
	if objs := fakeObjects(t, home); len(objs) != 0 {
		t.Fatalf("driver objects left: %v", objs)
	}
}

// SIGTERM during startup recovery shuts down gracefully and
// leaves nothing pending.
func TestSIGTERMDuringStartupRecovery(t *testing.T) {
	home := t.TempDir()
	g := startGateway(t, home)
	c := api(t, home)
	var ids []string
	for _, name := range []string{"r1", "r2", "r3"} {
		resp, err := c.CreateSandbox(context.Background(), &corralv1.CreateSandboxRequest{Name: name})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, resp.Sandbox.Id)
		waitPhase(t, c, name, "ready")
	}
	g.signal(syscall.SIGTERM)
	if code := g.exitCode(30 * time.Second); code != 0 {
		t.Fatalf("exit code %d", code)
	}
	// While the gateway is down the sandboxes stop; the recovery of the next
	// gateway must start them again, and that start is held.
	d, err := fake.New(driver.Config{Label: "corral.managed", StateDir: stateDir(home)}, fake.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if err := d.Stop(context.Background(), driver.Ref{ID: id, Generation: 1}, driver.StopOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	setFaults(t, home, faults.Rule{Op: "start", Action: "hold"})

	t.Run("held recovery call", func(t *testing.T) {
		g := launch(t, home, "--shutdown-timeout", "500ms")
		waitHeld(t, home, "start", ids[0])
		g.signal(syscall.SIGTERM)
		if code := g.exitCode(30 * time.Second); code != 0 {
			t.Fatalf("exit code %d\n%s", code, g.logs.String())
		}
		ops := journal(t, home)
		assertNothingPending(t, ops)
		interrupted := 0
		for _, op := range ops {
			if op.Kind == sandbox.OpDriverStart && op.State == sandbox.OpInterrupted {
				interrupted++
			}
		}
		if interrupted == 0 {
			t.Fatal("no driver.start settled as interrupted")
		}
	})
	t.Run("signal at first log line", func(t *testing.T) {
		g := launch(t, home, "--shutdown-timeout", "500ms")
		limit := time.Now().Add(30 * time.Second)
		for !strings.Contains(g.logs.String(), "gateway starting") && !g.exited() {
			if time.Now().After(limit) {
				t.Fatal("no start-up log line")
			}
			time.Sleep(time.Millisecond)
		}
		g.signal(syscall.SIGTERM)
		if code := g.exitCode(30 * time.Second); code != 0 {
			t.Fatalf("exit code %d\n%s", code, g.logs.String())
		}
		assertNothingPending(t, journal(t, home))
	})
	setFaults(t, home)
	startGateway(t, home)
	c = api(t, home)
	for _, name := range []string{"r1", "r2", "r3"} {
		waitPhase(t, c, name, "ready")
	}
	emptyThroughAPI(t, c)
	if objs := fakeObjects(t, home); len(objs) != 0 {
		t.Fatalf("driver objects left: %v", objs)
	}
}

// SIGKILL mid-call; after a restart the entry is interrupted,
// the reconciler converges and delete succeeds.
func TestSIGKILLMidCallThenRestart(t *testing.T) {
	home := t.TempDir()
	g := startGateway(t, home)
	setFaults(t, home, faults.Rule{Op: "start", Action: "hold"})
	id := strings.TrimSpace(mustCorral(t, home, "sandbox", "create", "--name", "killed", "--detach"))
	waitHeld(t, home, "start", id)
	g.signal(syscall.SIGKILL)
	g.exitCode(30 * time.Second)
	setFaults(t, home)

	startGateway(t, home)
	c := api(t, home)
	waitPhase(t, c, "killed", "ready")
	ops, err := c.ListOperations(context.Background(), &corralv1.ListOperationsRequest{Name: "killed"})
	if err != nil {
		t.Fatal(err)
	}
	interrupted := false
	for _, op := range ops.Operations {
		if op.Kind == "driver.start" && op.State == "interrupted" {
			interrupted = true
		}
		if op.State == "pending" {
			t.Errorf("entry %d %s pending", op.Id, op.Kind)
		}
	}
	if !interrupted {
		t.Fatalf("no interrupted driver.start in %v", ops.Operations)
	}
	mustCorral(t, home, "sandbox", "delete", "killed")
	if out := mustCorral(t, home, "sandbox", "list", "-o", "json"); strings.TrimSpace(out) != "[]" {
		t.Fatalf("list after delete: %s", out)
	}
	if objs := fakeObjects(t, home); len(objs) != 0 {
		t.Fatalf("driver objects left: %v", objs)
	}
}

func TestSecondGatewayOnSameHomeRefused(t *testing.T) {
	home := t.TempDir()
	first := startGateway(t, home)
	second := launch(t, home)
	if code := second.exitCode(30 * time.Second); code != 1 {
		t.Fatalf("second gateway exit code %d", code)
	}
	if !strings.Contains(second.logs.String(), "another gateway") || !strings.Contains(second.logs.String(), home) {
		t.Fatalf("second gateway said: %s", second.logs.String())
	}
	if first.exited() {
		t.Fatal("the first gateway died")
	}
	mustCorral(t, home, "sandbox", "list")
}

// An invalid policy is refused with its file, line and field, by `policy
// check` without a gateway and by create, which makes no sandbox.
func TestInvalidPolicyIsRefused(t *testing.T) {
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "good.yaml"), filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(good, []byte("version: 1\nlimits: {pids: 64}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte("version: 1\nfilesystem_policy:\n  read_only: [/usr, lib]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	want := bad + `:3: filesystem_policy.read_only[1]: "lib" is not an absolute path`
	out, errOut, code := corralEnv(t, nil, "policy", "check", good, bad)
	if code != 1 || !strings.Contains(out, good+": valid: ") || !strings.Contains(errOut, want) {
		t.Fatalf("policy check: exit %d, stdout %q, stderr %q; want %q", code, out, errOut, want)
	}
	home := t.TempDir()
	startGateway(t, home)
	_, errOut, code = corral(t, home, "sandbox", "create", "--name", "p", "--policy", bad, "--", "sleep", "1")
	if code != 1 || !strings.Contains(errOut, want) {
		t.Fatalf("create with an invalid policy: exit %d, %q; want %q", code, errOut, want)
	}
	// Past the CLI (another client), the gateway refuses it too.
	_, err := api(t, home).CreateSandbox(context.Background(), &corralv1.CreateSandboxRequest{Name: "p",
		Spec: &corralv1.SandboxSpec{Command: []string{"sleep", "1"}, Policy: "version: 1\nlimits: {pids: many}\n"}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "line 2: limits.pids") {
		t.Fatalf("API create with an invalid policy: %v", err)
	}
	if out := mustCorral(t, home, "sandbox", "list", "-o", "json"); strings.Contains(out, `"p"`) {
		t.Fatalf("a sandbox was made from an invalid policy: %s", out)
	}
}
