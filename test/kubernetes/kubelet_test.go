package kubernetes

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/driver/drivertest"
	kube "github.com/corral-sandbox/corral/internal/driver/kubernetes"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/testenv"
)

// realNode is a cluster of testenv.KubeletKubeconfigEnv: its API server,
// the namespace of its kubeconfig's context, and its one node's IP.
type realNode struct {
	kubeconfig, namespace string
	api                   kubernetes.Interface
	ip                    string
}

func startRealNode(t testing.TB) *realNode {
	t.Helper()
	path := testenv.RequireKubelet(t)
	raw, err := clientcmd.LoadFromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := clientcmd.NewDefaultClientConfig(*raw, nil).ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	n := &realNode{kubeconfig: path, namespace: "default", api: kubernetes.NewForConfigOrDie(rc)}
	if c := raw.Contexts[raw.CurrentContext]; c != nil && c.Namespace != "" {
		n.namespace = c.Namespace
	}
	testenv.Eventually(t, 2*time.Minute, func() error {
		nodes, err := n.api.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, node := range nodes.Items {
			for _, c := range node.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
					for _, a := range node.Status.Addresses {
						if a.Type == corev1.NodeInternalIP {
							n.ip = a.Address
							return nil
						}
					}
				}
			}
		}
		return fmt.Errorf("no node is ready: %d nodes", len(nodes.Items))
	})
	return n
}

func (n *realNode) driver(t testing.TB, label string) *kube.Driver {
	t.Helper()
	d, err := kube.New(driver.Config{Label: label, Gateway: "gw-" + sandbox.ShortID(sandbox.NewID())},
		kube.Options{Kubeconfig: n.kubeconfig, Namespace: n.namespace, SupervisorImage: supervisorImage, PullPolicy: "never"})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// The whole conformance suite, exec, TTYs and logs included, on a real
// kubelet: the supervisor copied in by the init container runs the
// sandbox's processes.
func TestConformanceOnARealKubelet(t *testing.T) {
	n := startRealNode(t)
	drivertest.RunWith(t, func(t *testing.T, label string) driver.Driver { return n.driver(t, label) },
		drivertest.Options{InvalidImage: "Not An Image//ref"})
}

// The gateway on a real kubelet: a sandbox's command runs as the
// policy's user under the supervisor, `corral sandbox exec` reaches it,
// `corral sandbox cp` copies files in and out, `corral sandbox expose`
// serves its port, and its egress goes through the gateway's proxy, which lets through
// what its policy names (another sandbox's server) and nothing else.
func TestGatewayOnARealKubelet(t *testing.T) {
	n := startRealNode(t)
	home := t.TempDir()
	startGateway(t, home, n.kubeconfig, n.namespace, "--image-pull-policy", "never", "--kube-egress-listen", n.ip+":0")
	corral := func(args ...string) (string, error) {
		var out bytes.Buffer
		cmd := exec.Command(bin, append([]string{"--home", home}, args...)...)
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		return out.String(), err
	}
	must := func(args ...string) string {
		t.Helper()
		out, err := corral(args...)
		if err != nil {
			t.Fatalf("corral %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	api := client(t, home)
	must("sandbox", "create", "--name", "web", "--image", "corral-test/busybox:latest", "--", "httpd", "-f", "-p", "8080", "-h", "/tmp")
	web := waitPhase(t, api, "web", "ready", 2*time.Minute)
	if out := must("sandbox", "exec", "web", "--", "id", "-u"); strings.TrimSpace(out) != "1000" {
		t.Errorf("id -u in the sandbox: %q, want the policy's user 1000", out)
	}
	must("sandbox", "exec", "web", "--", "sh", "-c", "echo hello from web > /tmp/index.html")
	// files in and out of a running sandbox (through the exec stage)
	local := t.TempDir()
	writeFile(t, local+"/notes.txt", "copied in\n")
	must("sandbox", "cp", local+"/notes.txt", "web:notes.txt")
	if out := must("sandbox", "exec", "web", "--", "sh", "-c", "cat /sandbox/notes.txt; stat -c %u /sandbox/notes.txt"); out != "copied in\n1000\n" {
		t.Errorf("the copied file in the sandbox: %q; want its content, owned by 1000", out)
	}
	must("sandbox", "cp", "web:/tmp/index.html", local+"/index.html")
	if got, err := os.ReadFile(local + "/index.html"); err != nil || string(got) != "hello from web\n" {
		t.Errorf("copied out: %q, %v", got, err)
	}
	// its port, served on the gateway's host (through the Pod's exec)
	exposed := strings.Fields(must("sandbox", "expose", "web", "8080"))
	addr := exposed[len(exposed)-1]
	resp, err := http.Get("http://" + strings.TrimPrefix(addr, "http://") + "/")
	if err != nil {
		t.Fatalf("the exposed port %s: %v", addr, err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(page), "hello from web") {
		t.Errorf("the exposed port %s answered %q", addr, page)
	}
	_, active := podsOfReal(t, n, web.Id)
	if len(active) != 1 || active[0].Status.PodIP == "" {
		t.Fatalf("web's pods: %d running, IP %q", len(active), podIP(active))
	}
	ip := active[0].Status.PodIP

	policy := t.TempDir() + "/policy.yaml"
	writeFile(t, policy, "version: 1\nnetwork_policies:\n  web:\n    endpoints:\n      - host: web.test\n        ports: [8080]\n        allowed_ips: [10.0.0.0/8]\n")
	must("sandbox", "create", "--name", "agent", "--image", "corral-test/busybox:latest", "--policy", policy, "--add-host", "web.test:"+ip, "--", "sleep", "3600")
	waitPhase(t, api, "agent", "ready", 2*time.Minute)
	if out := must("sandbox", "exec", "agent", "--", "wget", "-q", "-O-", "http://web.test:8080/"); !strings.Contains(out, "hello from web") {
		t.Errorf("the allowed server through the proxy: %q", out)
	}
	out, err := corral("sandbox", "exec", "agent", "--", "wget", "-q", "-O-", "http://other.test:8080/")
	if err == nil || !strings.Contains(out, "403") {
		t.Errorf("a host the policy does not name: %v %q; want wget to fail on 403", err, out)
	}
	if out := must("sandbox", "denials", "agent"); !strings.Contains(out, "other.test") {
		t.Errorf("agent's denials: %q; want other.test", out)
	}
}

func podsOfReal(t *testing.T, n *realNode, id string) (all, active []corev1.Pod) {
	c := &cluster{api: n.api, namespace: n.namespace}
	return c.podsOf(t, id)
}

func podIP(pods []corev1.Pod) string {
	if len(pods) == 0 {
		return ""
	}
	return pods[0].Status.PodIP
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
