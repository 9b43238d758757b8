package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
	"github.com/corral-sandbox/corral/internal/driver/fake/faults"
	"github.com/corral-sandbox/corral/internal/testenv"
)

// waitPoolFull waits until pool has size members, all ready.
func waitPoolFull(t *testing.T, home, pool string, size int32) {
	t.Helper()
	testenv.Eventually(t, 90*time.Second, func() error {
		var list []map[string]any
		if err := json.Unmarshal([]byte(mustCorral(t, home, "pool", "list", "-o", "json")), &list); err != nil {
			return err
		}
		for _, p := range list {
			if p["name"] == pool {
				if p["ready"] == float64(size) && p["members"] == float64(size) {
					return nil
				}
				return fmt.Errorf("pool %s: %v ready of %v members, want %d", pool, p["ready"], p["members"], size)
			}
		}
		return fmt.Errorf("pool %s not listed", pool)
	})
}

// claimed is what one create --pool through the CLI said.
type claimed struct {
	name, id string
	cold     bool
}

func claimThroughCLI(t *testing.T, home, name, pool string, args ...string) claimed {
	t.Helper()
	out, errOut, code := corral(t, home, append([]string{"sandbox", "create", "--name", name, "--pool", pool, "--label", "owner=" + name}, args...)...)
	if code != 0 {
		t.Fatalf("create %s --pool %s: exit %d\n%s%s", name, pool, code, out, errOut)
	}
	cold := strings.Contains(errOut, "not from the pool: pool \""+pool+"\" had no ready sandbox")
	return claimed{name: name, id: strings.TrimSpace(out), cold: cold}
}

// poolLifecycle is the warm-pool scenario on a real driver: restart
// restarts the gateway on home.
func poolLifecycle(t *testing.T, home string, restart func()) {
	mustCorral(t, home, "pool", "create", "warm", "--size", "2")
	if _, errOut, code := corral(t, home, "pool", "create", "warm", "--size", "2"); code == 0 || !strings.Contains(errOut, `pool "warm" already exists`) {
		t.Errorf("second pool warm: exit %d, %q", code, errOut)
	}
	waitPoolFull(t, home, "warm", 2)

	first := claimThroughCLI(t, home, "first", "warm")
	if first.cold {
		t.Fatal("a claim from a full pool was created cold")
	}
	if out := mustCorral(t, home, "sandbox", "exec", "first", "--", "echo", "hi"); out != "hi\n" {
		t.Fatalf("exec in the claimed sandbox: %q", out)
	}
	if v := getJSON(t, home, "first"); v["phase"] != "ready" || !strings.Contains(fmt.Sprint(v["labels"]), "owner:first") || strings.Contains(fmt.Sprint(v["labels"]), "corral.pool") {
		t.Errorf("claimed sandbox = %v", v)
	}
	waitPoolFull(t, home, "warm", 2)

	// Three claims at once (through the API, so that they come within
	// microseconds of each other) from a pool of two: a member is never
	// given twice, and one that found none ready says it was made cold.
	client, answers := api(t, home), make(chan claimed, 3)
	for i := range 3 {
		go func() {
			name := fmt.Sprintf("c%d", i)
			resp, err := client.CreateSandbox(context.Background(), &corralv1.CreateSandboxRequest{Name: name, Pool: "warm"})
			if err != nil {
				t.Errorf("claim %s: %v", name, err)
				answers <- claimed{name: name}
				return
			}
			if !resp.FromPool && !strings.Contains(resp.PoolReason, `pool "warm" had no ready sandbox`) {
				t.Errorf("claim %s was cold, with reason %q", name, resp.PoolReason)
			}
			answers <- claimed{name: name, id: resp.Sandbox.Id, cold: !resp.FromPool}
		}()
	}
	var got []claimed
	for range 3 {
		got = append(got, <-answers)
	}
	ids, cold := map[string]bool{first.id: true}, 0
	for _, c := range got {
		if ids[c.id] {
			t.Errorf("sandbox %s handed out twice", c.id)
		}
		ids[c.id] = true
		if c.cold {
			cold++
		}
		waitPhase(t, client, c.name, "ready")
		if out := mustCorral(t, home, "sandbox", "exec", c.name, "--", "echo", "hi"); out != "hi\n" {
			t.Errorf("exec in %s: %q", c.name, out)
		}
	}
	if cold < 1 {
		t.Errorf("three claims on a pool of two: none was cold: %v", got)
	}

	restart()
	waitPoolFull(t, home, "warm", 2)
	mustCorral(t, home, "sandbox", "exec", "first", "--", "true")

	if out := mustCorral(t, home, "pool", "delete", "warm"); !strings.Contains(out, "deleted pool warm (2 unclaimed") {
		t.Errorf("pool delete: %q", out)
	}
	testenv.Eventually(t, 60*time.Second, func() error {
		var list []map[string]any
		if err := json.Unmarshal([]byte(mustCorral(t, home, "sandbox", "list", "-o", "json")), &list); err != nil {
			return err
		}
		if len(list) != 4 {
			return fmt.Errorf("%d sandboxes, want the 4 claimed ones", len(list))
		}
		return nil
	})
	if out := mustCorral(t, home, "pool", "list"); strings.Contains(out, "warm") {
		t.Errorf("pool list after delete: %q", out)
	}
	if _, errOut, code := corral(t, home, "sandbox", "create", "--name", "late", "--pool", "warm"); code == 0 || !strings.Contains(errOut, `pool "warm" not found`) {
		t.Errorf("claim from a deleted pool: exit %d, %q", code, errOut)
	}
	mustCorral(t, home, "sandbox", "exec", "first", "--", "true")
}

// restarter restarts the gateway start started, gracefully.
func restarter(start func() *gatewayProc) func() {
	g := start()
	return func() {
		g.signal(syscall.SIGTERM)
		g.exitCode(30 * time.Second)
		g = start()
	}
}

func TestPoolThroughCLIOnFake(t *testing.T) {
	home := t.TempDir()
	poolLifecycle(t, home, restarter(func() *gatewayProc { return startGateway(t, home) }))
}

// The CLI says on stderr when a create from a pool was made cold: here the
// fake driver holds every create, so the pool never has one ready.
func TestPoolEmptyClaimSaysSoThroughCLI(t *testing.T) {
	home := t.TempDir()
	startGateway(t, home)
	setFaults(t, home, faults.Rule{Op: "create", Action: "hold"})
	mustCorral(t, home, "pool", "create", "warm", "--size", "1")
	if c := claimThroughCLI(t, home, "cold", "warm", "--detach"); !c.cold {
		t.Fatal("a create from a pool with none ready did not say it was made cold")
	}
	setFaults(t, home)
	waitPoolFull(t, home, "warm", 1)
	if c := claimThroughCLI(t, home, "warm1", "warm"); c.cold {
		t.Fatal("a create from a full pool said it was made cold")
	}
}

func TestNativePool(t *testing.T) {
	home := t.TempDir()
	poolLifecycle(t, home, restarter(func() *gatewayProc { return nativeGateway(t, home) }))
}

func TestDockerPool(t *testing.T) {
	testenv.RequireDocker(t)
	home, label := t.TempDir(), newLabel(t)
	poolLifecycle(t, home, restarter(func() *gatewayProc { return dockerGateway(t, home, label) }))
	testenv.Eventually(t, 60*time.Second, func() error {
		if got := containersOf(t, label); len(got) != 4 {
			return fmt.Errorf("containers after pool delete = %v, want the 4 claimed", got)
		}
		return nil
	})
}
