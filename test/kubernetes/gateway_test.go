package kubernetes

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/testenv"
)

var bin string

func TestMain(m *testing.M) { testenv.MainWithCorral(m, &bin) }

// kubeconfig writes a kubeconfig of rc's credentials for server.
func kubeconfig(t *testing.T, rc *rest.Config, server string) string {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := WriteKubeconfig(rc, server, "", path); err != nil {
		t.Fatal(err)
	}
	return path
}

// gateway is a corral gateway child process on the kubernetes driver.
type gateway struct {
	cmd  *exec.Cmd
	logs *testenv.SyncBuffer
	done chan struct{}
}

func startGateway(t *testing.T, home, kubeconfigPath, namespace string, args ...string) *gateway {
	t.Helper()
	g := &gateway{logs: &testenv.SyncBuffer{}, done: make(chan struct{})}
	g.cmd = exec.Command(bin, append([]string{"--home", home, "gateway", "--log-level", "debug", "--driver", "kubernetes",
		"--kubeconfig", kubeconfigPath, "--namespace", namespace, "--kube-supervisor-image", supervisorImage, "--orphan-grace", "2s"}, args...)...)
	g.cmd.Stdout, g.cmd.Stderr = g.logs, g.logs
	if err := g.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { g.cmd.Wait(); close(g.done) }()
	t.Cleanup(func() {
		g.cmd.Process.Kill()
		<-g.done
		if t.Failed() {
			t.Logf("gateway log:\n%s", g.logs.String())
		}
	})
	api := client(t, home)
	testenv.Eventually(t, 30*time.Second, func() error {
		select {
		case <-g.done:
			t.Fatalf("gateway exited: %s", g.logs.String())
		default:
		}
		_, err := api.ListSandboxes(context.Background(), &corralv1.ListSandboxesRequest{})
		return err
	})
	return g
}

func client(t *testing.T, home string) corralv1.SandboxServiceClient {
	conn, err := grpc.NewClient("unix://"+filepath.Join(home, "corral.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return corralv1.NewSandboxServiceClient(conn)
}

func waitPhase(t *testing.T, api corralv1.SandboxServiceClient, name, phase string, limit time.Duration) *corralv1.Sandbox {
	t.Helper()
	var sb *corralv1.Sandbox
	testenv.Eventually(t, limit, func() error {
		var err error
		sb, err = api.GetSandbox(context.Background(), &corralv1.GetSandboxRequest{Name: name})
		if err == nil && sb.Phase != phase {
			err = fmt.Errorf("sandbox %s is %s (%s), not %s", name, sb.Phase, sb.Reason, phase)
		}
		return err
	})
	return sb
}

// podsOf lists the Pods of a sandbox id, those still running or to run.
func (c *cluster) podsOf(t *testing.T, id string) (all, active []corev1.Pod) {
	t.Helper()
	list, err := c.api.CoreV1().Pods(c.namespace).List(context.Background(), metav1.ListOptions{LabelSelector: driver.LabelSandboxID + "=" + id})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			active = append(active, p)
		}
	}
	return list.Items, active
}

// The gateway on the kubernetes driver: 50 rapid stops and starts end
// with one Pod of the newest generation and nothing deleted; with the
// API server unreachable for 30 s, requests are accepted and journaled
// and the phases say why, and all converges once it is back; a gateway
// SIGKILLed mid-create converges after its restart, leaving no Pod
// without a record.
func TestGatewayOnKubernetes(t *testing.T) {
	c := startCluster(t)
	u, err := url.Parse(c.rc.Host)
	if err != nil {
		t.Fatal(err)
	}
	proxy := testenv.NewTCPSwitch(t, u.Host)
	kc := kubeconfig(t, c.rc, "https://"+proxy.Addr)
	home := t.TempDir()
	g := startGateway(t, home, kc, c.namespace)
	api := client(t, home)
	ctx := context.Background()
	create := func(name string) *corralv1.Sandbox {
		sb, err := api.CreateSandbox(ctx, &corralv1.CreateSandboxRequest{Name: name, Spec: &corralv1.SandboxSpec{Image: "corral-test/busybox:latest", Command: []string{"sleep", "3600"}}})
		if err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
		return sb.Sandbox
	}
	web := create("web")
	waitPhase(t, api, "web", "ready", 30*time.Second)

	t.Run("RapidStopStart", func(t *testing.T) {
		for i := range 50 {
			var err error
			if i%2 == 0 {
				_, err = api.StopSandbox(ctx, &corralv1.StopSandboxRequest{Name: "web"})
			} else {
				_, err = api.StartSandbox(ctx, &corralv1.StartSandboxRequest{Name: "web"})
			}
			if err != nil {
				t.Fatalf("request %d: %v", i, err)
			}
		}
		sb := waitPhase(t, api, "web", "ready", time.Minute)
		if sb.Id != web.Id {
			t.Fatalf("web is now sandbox %s, was %s", sb.Id, web.Id)
		}
		testenv.Eventually(t, 30*time.Second, func() error {
			all, active := c.podsOf(t, web.Id)
			if len(all) != 1 || len(active) != 1 || active[0].Labels[driver.LabelGeneration] != fmt.Sprint(sb.Generation) {
				return fmt.Errorf("%d pods, %d active (%v); want one, of generation %d", len(all), len(active), names(all), sb.Generation)
			}
			return nil
		})
	})

	t.Run("APIServerAway", func(t *testing.T) {
		proxy.Down()
		away := time.Now()
		create("offline")
		if _, err := api.StopSandbox(ctx, &corralv1.StopSandboxRequest{Name: "web"}); err != nil {
			t.Fatalf("stop while the API server is away: %v", err)
		}
		testenv.Eventually(t, 20*time.Second, func() error {
			sb, err := api.GetSandbox(ctx, &corralv1.GetSandboxRequest{Name: "offline"})
			if err != nil {
				return err
			}
			if !strings.Contains(sb.Reason, "does not answer") {
				return fmt.Errorf("offline is %s: %q; want a reason naming the API server", sb.Phase, sb.Reason)
			}
			return nil
		})
		journal, err := api.ListOperations(ctx, &corralv1.ListOperationsRequest{Name: "offline"})
		if err != nil || len(journal.Operations) == 0 {
			t.Errorf("the journal of offline: %v, %v; want its create", journal, err)
		}
		time.Sleep(time.Until(away.Add(30 * time.Second)))
		proxy.Up(t)
		waitPhase(t, api, "offline", "ready", time.Minute)
		waitPhase(t, api, "web", "stopped", time.Minute)
		list, err := api.ListSandboxes(ctx, &corralv1.ListSandboxesRequest{})
		if err != nil || len(list.Sandboxes) != 2 {
			t.Fatalf("sandboxes after the API server came back: %v, %v; want web and offline", list, err)
		}
	})

	t.Run("KilledMidCreate", func(t *testing.T) {
		if _, err := api.CreateSandbox(ctx, &corralv1.CreateSandboxRequest{Name: "killed", Spec: &corralv1.SandboxSpec{Image: "corral-test/busybox:latest", Command: []string{"sleep", "3600"}}}); err != nil {
			t.Fatal(err)
		}
		g.cmd.Process.Signal(syscall.SIGKILL)
		<-g.done
		startGateway(t, home, kc, c.namespace)
		api := client(t, home)
		sb := waitPhase(t, api, "killed", "ready", time.Minute)
		if _, active := c.podsOf(t, sb.Id); len(active) != 1 {
			t.Errorf("killed has %d running pods, want 1", len(active))
		}
		list, err := api.ListSandboxes(ctx, &corralv1.ListSandboxesRequest{})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, sb := range list.Sandboxes {
			ids = append(ids, sb.Id)
		}
		testenv.Eventually(t, 30*time.Second, func() error {
			pods, err := c.api.CoreV1().Pods(c.namespace).List(ctx, metav1.ListOptions{})
			if err != nil {
				return err
			}
			for _, p := range pods.Items {
				if !slices.Contains(ids, p.Labels[driver.LabelSandboxID]) {
					return fmt.Errorf("pod %s has no record", p.Name)
				}
			}
			return nil
		})
	})
}

func names(pods []corev1.Pod) []string {
	var n []string
	for _, p := range pods {
		n = append(n, p.Name+"("+string(p.Status.Phase)+")")
	}
	return n
}

// The gateway serves its egress proxy to the cluster's Pods: a Pod's
// token meets its sandbox's network_policies there, whose refusals are
// the sandbox's denials; nothing passes without a token; a gateway
// started anew lets the running Pod's token in again.
func TestGatewayServesEgressToPods(t *testing.T) {
	c := startCluster(t)
	kc := kubeconfig(t, c.rc, c.rc.Host)
	home := t.TempDir()
	g := startGateway(t, home, kc, c.namespace, "--kube-egress-listen", "127.0.0.1:0")
	api := client(t, home)
	ctx := context.Background()
	const pol = "version: 1\nnetwork_policies:\n  docs:\n    endpoints:\n      - host: docs.test\n        ports: [80]\n"
	sb, err := api.CreateSandbox(ctx, &corralv1.CreateSandboxRequest{Name: "agent", Spec: &corralv1.SandboxSpec{
		Image: "corral-test/busybox:latest", Command: []string{"sleep", "3600"}, Policy: pol}})
	if err != nil {
		t.Fatal(err)
	}
	waitPhase(t, api, "agent", "ready", 30*time.Second)
	_, active := c.podsOf(t, sb.Sandbox.Id)
	if len(active) != 1 {
		t.Fatalf("%d running pods, want 1", len(active))
	}
	proxy := c.podProxy(t, active[0])
	if got := get(t, proxy, "http://elsewhere.test/"); got != http.StatusForbidden {
		t.Errorf("a host the policy does not name: %d, want 403", got)
	}
	if got := get(t, &url.URL{Scheme: "http", Host: proxy.Host}, "http://docs.test/"); got != http.StatusProxyAuthRequired {
		t.Errorf("without the token: %d, want 407", got)
	}
	stream, err := api.SandboxDenials(ctx, &corralv1.SandboxDenialsRequest{Name: "agent"})
	if err != nil {
		t.Fatal(err)
	}
	var hosts []string
	for {
		d, err := stream.Recv()
		if err != nil {
			break
		}
		hosts = append(hosts, d.Host)
	}
	if !slices.Contains(hosts, "elsewhere.test") {
		t.Errorf("the sandbox's denials name %q; want elsewhere.test", hosts)
	}

	g.cmd.Process.Signal(syscall.SIGKILL)
	<-g.done
	// The new gateway listens where the running Pod was told to (its
	// NetworkPolicy and proxy URL name that address).
	startGateway(t, home, kc, c.namespace, "--kube-egress-listen", proxy.Host)
	testenv.Eventually(t, 30*time.Second, func() error {
		if got, err := fetch(proxy, "http://elsewhere.test/"); err != nil || got != http.StatusForbidden {
			return fmt.Errorf("after the gateway's restart, the Pod's token: %d, %v; want 403 (its rules)", got, err)
		}
		return nil
	})
}
