package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/client"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/testenv"
)

// dockerGateway starts a gateway on the Docker driver with a label of its
// own, so that tests never see each other's containers.
func dockerGateway(t *testing.T, home, label string, args ...string) *gatewayProc {
	t.Helper()
	testenv.UnmountUnder(t, home) // the run directories of sandboxes a test leaves
	return startGateway(t, home, dockerArgs(label, args...)...)
}

func dockerArgs(label string, args ...string) []string {
	all := []string{"--driver", "docker", "--default-image", testenv.TestImage,
		"--image-pull-policy", "never", "--sandbox-label", label, "--stop-timeout", "2s"}
	if host := testenv.DockerHost(); host != "" {
		all = append(all, "--docker-host", host) // a later --docker-host in args wins
	}
	return append(all, args...)
}

func newLabel(t *testing.T) string {
	t.Helper()
	label := "corral.test." + sandbox.NewID()[:10]
	t.Cleanup(func() { removeContainers(t, label) })
	return label
}

func engine(t *testing.T) *client.Client {
	t.Helper()
	api, err := testenv.DockerClient()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { api.Close() })
	return api
}

// containersOf lists every container carrying label, as `docker ps -a` would.
func containersOf(t *testing.T, label string) []string {
	t.Helper()
	res, err := engine(t).ContainerList(context.Background(), client.ContainerListOptions{
		All: true, Filters: client.Filters{}.Add("label", label+"=true")})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, c := range res.Items {
		out = append(out, strings.TrimPrefix(c.Names[0], "/")+" "+string(c.State))
	}
	return out
}

func removeContainers(t *testing.T, label string) {
	api, err := testenv.DockerClient()
	if err != nil {
		return
	}
	defer api.Close()
	ctx := context.Background()
	res, err := api.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: client.Filters{}.Add("label", label+"=true")})
	if err != nil {
		return
	}
	for _, c := range res.Items {
		api.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	}
	vols, err := api.VolumeList(ctx, client.VolumeListOptions{Filters: client.Filters{}.Add("label", label+"=true")})
	if err == nil {
		for _, v := range vols.Items {
			api.VolumeRemove(ctx, v.Name, client.VolumeRemoveOptions{Force: true})
		}
	}
}

func getJSON(t *testing.T, home, name string) map[string]any {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal([]byte(mustCorral(t, home, "sandbox", "get", name, "-o", "json")), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestDockerSandboxThroughCLI(t *testing.T) {
	testenv.RequireDocker(t)
	home, label := t.TempDir(), newLabel(t)
	dockerGateway(t, home, label)
	mustCorral(t, home, "sandbox", "create", "--name", "box", "--", "sh", "-c", "echo hello from main; exec sleep 1000")
	if got := containersOf(t, label); len(got) != 1 || !strings.HasPrefix(got[0], "corral-box-") || !strings.HasSuffix(got[0], " running") {
		t.Fatalf("containers = %v", got)
	}
	out, errOut, code := corral(t, home, "sandbox", "exec", "box", "--", "sh", "-c", "echo out; echo err >&2; hostname; echo kept > /sandbox/file; exit 3")
	if code != 3 || out != "out\nbox\n" || errOut != "err\n" {
		t.Fatalf("exec: code %d stdout %q stderr %q", code, out, errOut)
	}
	if logs := mustCorral(t, home, "sandbox", "logs", "box"); !strings.Contains(logs, "hello from main") {
		t.Fatalf("logs = %q", logs)
	}
	mustCorral(t, home, "sandbox", "stop", "box")
	if got := containersOf(t, label); len(got) != 1 || !strings.HasSuffix(got[0], " exited") {
		t.Fatalf("after stop: %v", got)
	}
	startKeepsWorkdir(t, home, "box")
	mustCorral(t, home, "sandbox", "delete", "box")
	if got := containersOf(t, label); len(got) != 0 {
		t.Fatalf("containers left after delete: %v", got)
	}
}

// 200 stop/start cycles through the CLI without a pause: never an
// auto-deleted or lost sandbox, one container at the end.
func TestDockerRapidStopStart(t *testing.T) {
	testenv.RequireDocker(t)
	home, label := t.TempDir(), newLabel(t)
	dockerGateway(t, home, label)
	id := strings.TrimSpace(mustCorral(t, home, "sandbox", "create", "--name", "flip", "--", "sleep", "1000"))
	deleted := watchDeletes(t, home, "flip")

	cycles := 200
	if testing.Short() {
		cycles = 20
	}
	for i := range cycles {
		for _, verb := range []string{"stop", "start"} {
			if out, errOut, code := corral(t, home, "sandbox", verb, "flip"); code != 0 {
				t.Fatalf("cycle %d: %s: exit %d %s%s", i, verb, code, out, errOut)
			}
		}
	}
	v := getJSON(t, home, "flip")
	if v["id"] != id || v["phase"] != "ready" || v["generation"] != float64(cycles+1) {
		t.Fatalf("after %d cycles: %v", cycles, v)
	}
	if got := containersOf(t, label); len(got) != 1 || !strings.HasSuffix(got[0], " running") {
		t.Fatalf("containers = %v, want the one running container", got)
	}
	select {
	case <-deleted:
		t.Fatal("the sandbox was deleted during the cycles")
	default:
	}
	mustCorral(t, home, "sandbox", "delete", "flip")
}

// SIGKILL while an Engine API call is held by a relay: after a restart
// the entry is interrupted and the sandbox converges.
func TestDockerSIGKILLWithEngineCallInFlight(t *testing.T) {
	testenv.RequireDocker(t)
	for _, call := range []string{"create", "start"} {
		t.Run(call, func(t *testing.T) {
			home, label := t.TempDir(), newLabel(t)
			relay := testenv.NewRelay(t, testenv.DockerSocket())
			host := "unix://" + relay.Path
			relay.HoldAndCarryOut(`^POST .*/containers/` + map[string]string{"create": "create", "start": "[0-9a-f]+/start"}[call] + `$`)
			g := dockerGateway(t, home, label, "--docker-host", host)
			mustCorral(t, home, "sandbox", "create", "--name", "victim", "--detach", "--", "sleep", "1000")
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, err := relay.Held(ctx); err != nil {
				t.Fatal(err)
			}
			g.signal(syscall.SIGKILL)
			g.exitCode(30 * time.Second)
			relay.Release() // the engine finishes the call with nobody waiting

			dockerGateway(t, home, label, "--docker-host", host)
			c := api(t, home)
			waitPhase(t, c, "victim", "ready")
			for _, verb := range []string{"stop", "start"} {
				mustCorral(t, home, "sandbox", verb, "victim")
			}
			if got := containersOf(t, label); len(got) != 1 {
				t.Fatalf("containers = %v, want one", got)
			}
			mustCorral(t, home, "sandbox", "delete", "victim")
			if got := containersOf(t, label); len(got) != 0 {
				t.Fatalf("containers left after delete: %v", got)
			}
		})
	}
}

// A wrong host, an engine that goes away, a missing image: each a clear
// error, and each recovered from.
func TestDockerEngineFailuresAreClearAndRecoverable(t *testing.T) {
	testenv.RequireDocker(t)
	t.Run("wrong docker host", func(t *testing.T) {
		home, label := t.TempDir(), newLabel(t)
		dockerGateway(t, home, label, "--docker-host", "unix:///nonexistent/docker.sock")
		mustCorral(t, home, "sandbox", "create", "--name", "lost", "--detach")
		reason := waitReason(t, home, "lost", "does not answer")
		if !strings.Contains(reason, "unix:///nonexistent/docker.sock") {
			t.Fatalf("reason %q does not name the host", reason)
		}
		mustCorral(t, home, "sandbox", "delete", "lost", "--detach")
		if v := getJSON(t, home, "lost"); v["phase"] != "deleting" {
			t.Fatalf("a delete the engine cannot confirm must leave the record visible: %v", v)
		}
	})
	t.Run("engine goes away and returns", func(t *testing.T) {
		home, label := t.TempDir(), newLabel(t)
		relay := testenv.NewRelay(t, testenv.DockerSocket())
		dockerGateway(t, home, label, "--docker-host", "unix://"+relay.Path)
		mustCorral(t, home, "sandbox", "create", "--name", "steady", "--", "sleep", "1000")
		relay.Down()
		mustCorral(t, home, "sandbox", "stop", "steady", "--detach")
		waitReason(t, home, "steady", "does not answer")
		relay.Up()
		waitPhase(t, api(t, home), "steady", "stopped")
		mustCorral(t, home, "sandbox", "start", "steady")
		mustCorral(t, home, "sandbox", "delete", "steady")
		if got := containersOf(t, label); len(got) != 0 {
			t.Fatalf("containers left: %v", got)
		}
	})
	t.Run("missing image", func(t *testing.T) {
		home, label := t.TempDir(), newLabel(t)
		dockerGateway(t, home, label)
		mustCorral(t, home, "sandbox", "create", "--name", "noimg", "--image", "corral-test/nope:1", "--detach")
		waitReason(t, home, "noimg", `image "corral-test/nope:1" is not on the engine and image_pull_policy is never`)
		mustCorral(t, home, "sandbox", "delete", "noimg")
	})
}

// waitReason waits until the sandbox's reason mentions want, and returns it.
func waitReason(t *testing.T, home, name, want string) string {
	t.Helper()
	var reason string
	testenv.Eventually(t, 60*time.Second, func() error {
		sb, err := api(t, home).GetSandbox(context.Background(), &corralv1.GetSandboxRequest{Name: name})
		if err != nil {
			t.Fatal(err)
		}
		if reason = sb.Reason; !strings.Contains(reason, want) {
			return fmt.Errorf("reason of %s does not mention %q: %q (phase %s)", name, want, sb.Reason, sb.Phase)
		}
		return nil
	})
	return reason
}

func TestDockerMainProcessExitAndRestartPolicy(t *testing.T) {
	testenv.RequireDocker(t)
	home, label := t.TempDir(), newLabel(t)
	dockerGateway(t, home, label)
	mustCorral(t, home, "sandbox", "create", "--name", "once", "--restart", "never", "--", "sh", "-c", "exit 3")
	waitPhase(t, api(t, home), "once", "exited")
	if v := getJSON(t, home, "once"); v["exit_code"] != 3.0 || v["restarts"] != 0.0 {
		t.Fatalf("exited record: %v", v)
	}
	mustCorral(t, home, "sandbox", "create", "--name", "retry", "--restart", "on_failure", "--max-restarts", "2", "--", "sh", "-c", "exit 1")
	waitReason(t, home, "retry", "limit of 2 restarts")
	v := getJSON(t, home, "retry")
	if v["exit_code"] != 1.0 || v["restarts"] != 2.0 || !strings.Contains(fmt.Sprint(v["reason"]), "limit of 2 restarts") {
		t.Fatalf("after the restart limit: %v", v)
	}
	mustCorral(t, home, "sandbox", "delete", "--all")
	if got := containersOf(t, label); len(got) != 0 {
		t.Fatalf("containers left: %v", got)
	}
}

func TestDockerGatewayRestartKeepsAndReconcilesContainers(t *testing.T) {
	testenv.RequireDocker(t)
	home, label := t.TempDir(), newLabel(t)
	g := dockerGateway(t, home, label)
	mustCorral(t, home, "sandbox", "create", "--name", "runner", "--", "sleep", "1000")
	mustCorral(t, home, "sandbox", "create", "--name", "rester", "--", "sleep", "1000")
	mustCorral(t, home, "sandbox", "stop", "rester")
	g.signal(syscall.SIGTERM)
	if code := g.exitCode(30 * time.Second); code != 0 {
		t.Fatalf("exit code %d", code)
	}
	running := 0
	for _, c := range containersOf(t, label) {
		if strings.HasPrefix(c, "corral-runner-") && strings.HasSuffix(c, " running") {
			running++
		}
	}
	if running != 1 {
		t.Fatalf("the running sandbox did not keep running while the gateway was down: %v", containersOf(t, label))
	}
	// Something stops the intended-running container while the gateway is down.
	id := getStoreID(t, home, "runner")
	if out, err := testenv.DockerCommand("stop", "-t", "1", "corral-runner-"+id[:12]).CombinedOutput(); err != nil {
		t.Fatalf("docker stop: %v %s", err, out)
	}
	dockerGateway(t, home, label)
	c := api(t, home)
	waitPhase(t, c, "runner", "ready")
	if sb := waitPhase(t, c, "rester", "stopped"); sb.DesiredState != "stopped" {
		t.Fatalf("rester = %v", sb)
	}
	mustCorral(t, home, "sandbox", "delete", "--all")
}

// getStoreID reads a sandbox's id from a stopped gateway's store.
func getStoreID(t *testing.T, home, name string) string {
	t.Helper()
	st := openStore(t, home)
	defer st.Close()
	sb, err := st.GetSandboxByName(context.Background(), "", name)
	if err != nil {
		t.Fatal(err)
	}
	return sb.ID
}

func TestDockerOrphanedContainerIsRemovedAfterGrace(t *testing.T) {
	testenv.RequireDocker(t)
	home, label := t.TempDir(), newLabel(t)
	dockerGateway(t, home, label, "--orphan-grace", "1s", "--resync-interval", "300ms")
	mustCorral(t, home, "sandbox", "create", "--name", "owned", "--", "sleep", "1000")
	out, err := testenv.DockerCommand("run", "-d", "--network", "none", "--label", label+"=true",
		"--label", "corral.sandbox.id=0000feed", "--name", "corral-stray-"+label[12:], testenv.TestImage, "sleep", "1000").CombinedOutput()
	if err != nil {
		t.Fatalf("docker run: %v %s", err, out)
	}
	testenv.Eventually(t, 60*time.Second, func() error {
		if got := containersOf(t, label); len(got) != 1 || !strings.HasPrefix(got[0], "corral-owned-") {
			return fmt.Errorf("the orphan was not removed: %v", got)
		}
		return nil
	})
	mustCorral(t, home, "sandbox", "delete", "owned")
}

// Two gateways (two homes) on one engine with one label: each sees the
// other's containers, and for longer than the orphan grace neither touches
// them; each says so at its start, and doctor names the other gateway.
func TestDockerTwoGatewaysOnOneLabelLeaveEachOthersSandboxes(t *testing.T) {
	testenv.RequireDocker(t)
	label := newLabel(t)
	homeA, homeB := t.TempDir(), t.TempDir()
	a := dockerGateway(t, homeA, label, "--orphan-grace", "1s", "--resync-interval", "300ms")
	mustCorral(t, homeA, "sandbox", "create", "--name", "first", "--", "sleep", "1000")
	waitPhase(t, api(t, homeA), "first", "ready")
	b := dockerGateway(t, homeB, label, "--orphan-grace", "1s", "--resync-interval", "300ms")
	mustCorral(t, homeB, "sandbox", "create", "--name", "second", "--", "sleep", "1000")
	waitPhase(t, api(t, homeB), "second", "ready")
	time.Sleep(4 * time.Second) // four orphan graces, a dozen resyncs each
	if got := containersOf(t, label); len(got) != 2 {
		t.Fatalf("containers under the shared label: %v; want both gateways' sandboxes", got)
	}
	for home, name := range map[string]string{homeA: "first", homeB: "second"} {
		if phase := getJSON(t, home, name)["phase"]; phase != "ready" {
			t.Errorf("%s: phase %v; want ready", name, phase)
		}
	}
	if !strings.Contains(b.logs.String(), "another gateway's compute objects share this engine") {
		t.Error("the second gateway did not say at start that another's objects share its engine")
	}
	for _, g := range []*gatewayProc{a, b} {
		if out := mustCorral(t, g.home, "gateway", "doctor"); !strings.Contains(out, "of another gateway") {
			t.Errorf("doctor of %s:\n%s\nwant the other gateway's container named", g.home, out)
		}
	}
	mustCorral(t, homeA, "sandbox", "delete", "first")
	mustCorral(t, homeB, "sandbox", "delete", "second")
}
