package kubernetes

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/driver/drivertest"
	kube "github.com/corral-sandbox/corral/internal/driver/kubernetes"
	"github.com/corral-sandbox/corral/internal/egress"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

// podProxy is the HTTP_PROXY of a Pod's main container, read as the
// kubelet reads it: from the Secret the Pod names, never from the Pod.
func (c *cluster) podProxy(t *testing.T, p corev1.Pod) *url.URL {
	t.Helper()
	for _, e := range p.Spec.Containers[0].Env {
		if e.Name != "HTTP_PROXY" {
			continue
		}
		if e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
			t.Fatalf("pod %s has HTTP_PROXY in its spec, not from a secret: %+v", p.Name, e)
		}
		ref := e.ValueFrom.SecretKeyRef
		sec, err := c.api.CoreV1().Secrets(p.Namespace).Get(context.Background(), ref.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		u, err := url.Parse(string(sec.Data[ref.Key]))
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	t.Fatalf("pod %s has no HTTP_PROXY: %v", p.Name, p.Spec.Containers[0].Env)
	return nil
}

// get fetches target through proxy, as a process of the Pod would, and
// returns the status.
func get(t *testing.T, proxy *url.URL, target string) int {
	t.Helper()
	status, err := fetch(proxy, target)
	if err != nil {
		t.Fatal(err)
	}
	return status
}

// fetch is get that returns an error for a proxy that does not answer.
func fetch(proxy *url.URL, target string) (int, error) {
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(proxy)}}
	defer c.CloseIdleConnections()
	resp, err := c.Get(target)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// With the gateway's egress proxy shared, a sandbox's NetworkPolicy lets
// its Pods reach the proxy's address and port alone, its Pod has the
// proxy (with its incarnation's token) and the trust bundle, and what
// goes through the proxy with that token meets the sandbox's rules.
func TestEgressThroughTheSharedProxy(t *testing.T) {
	c := startCluster(t)
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello") }))
	defer upstream.Close()
	port := strings.TrimPrefix(upstream.URL, "http://127.0.0.1:")
	pol := drivertest.MustPolicy(t, `version: 1
network_policies:
  local:
    endpoints:
      - host: allowed.test
        ports: [`+port+`]
        allowed_ips: [127.0.0.0/8]
`)
	spec := driver.Spec{ID: sandbox.NewID(), Name: "egress", Generation: 1, Image: "corral-test/busybox:latest", Command: []string{"sleep", "3600"}, Policy: pol}
	eg := &egress.Sandboxes{Dir: t.TempDir(),
		Lookup: func(context.Context, string) (egress.Network, error) {
			return egress.Network{Name: spec.Name, Rules: pol.Network, Hosts: []string{"allowed.test:127.0.0.1"}}, nil
		},
		Placeholder: func(id string, gen int64, credential, role string) string {
			return fmt.Sprintf("token-%s-%d-%s-%x", id, gen, credential, role)
		}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	shared, err := eg.Share(ln, netip.MustParseAddrPort(ln.Addr().String()))
	if err != nil {
		t.Fatal(err)
	}
	defer eg.Forget(spec.ID)
	d, err := kube.New(driver.Config{Label: "corral.test." + sandbox.ShortID(sandbox.NewID())},
		kube.Options{REST: c.rc, Namespace: c.namespace, SupervisorImage: supervisorImage, Egress: shared})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := d.Create(ctx, spec); err != nil {
		t.Fatal(err)
	}
	ref := driver.Ref{ID: spec.ID, Generation: 1}
	if err := d.Start(ctx, ref); err != nil {
		t.Fatal(err)
	}
	sel := metav1.ListOptions{LabelSelector: driver.LabelSandboxID + "=" + spec.ID}

	nps, err := c.api.NetworkingV1().NetworkPolicies(c.namespace).List(ctx, sel)
	if err != nil || len(nps.Items) != 1 {
		t.Fatalf("network policies: %v, %v", nps, err)
	}
	np := nps.Items[0].Spec
	if len(np.Ingress) != 0 || len(np.Egress) != 1 || len(np.Egress[0].To) != 1 || np.Egress[0].To[0].IPBlock == nil ||
		np.Egress[0].To[0].IPBlock.CIDR != "127.0.0.1/32" || len(np.Egress[0].To[0].IPBlock.Except) != 0 ||
		len(np.Egress[0].Ports) != 1 || np.Egress[0].Ports[0].Port.IntValue() != int(shared.Addr().Port()) || *np.Egress[0].Ports[0].Protocol != corev1.ProtocolTCP {
		t.Errorf("network policy %+v; want egress to 127.0.0.1/32 TCP %d alone, no ingress", np, shared.Addr().Port())
	}

	pods, err := c.api.CoreV1().Pods(c.namespace).List(ctx, sel)
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("pods: %v, %v", pods, err)
	}
	p := pods.Items[0]
	proxy := c.podProxy(t, p)
	if spec, _ := json.Marshal(p.Spec); strings.Contains(string(spec), "token-") {
		t.Errorf("the Pod's spec holds its egress token: %s", spec)
	}
	if proxy.Host != shared.Addr().String() || proxy.User.Username() != spec.ID+".1" {
		t.Errorf("HTTP_PROXY %s; want the shared proxy, as generation 1 of the sandbox", proxy.Redacted())
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range p.Spec.Containers[0].VolumeMounts {
		mounts[m.MountPath] = m
	}
	if m, ok := mounts[driver.TrustDir]; !ok || !m.ReadOnly {
		t.Errorf("the trust directory is not mounted read-only: %v", mounts)
	}
	if m, ok := mounts[driver.SystemBundle]; !ok || m.SubPath != driver.BundleFile {
		t.Errorf("the bundle is not over the system's: %v", mounts)
	}
	cms, err := c.api.CoreV1().ConfigMaps(c.namespace).List(ctx, sel)
	if err != nil || len(cms.Items) != 1 || !strings.Contains(cms.Items[0].Data[driver.CAFile], "BEGIN CERTIFICATE") ||
		!strings.HasSuffix(cms.Items[0].Data[driver.BundleFile], cms.Items[0].Data[driver.CAFile]) {
		t.Errorf("egress certificates: %v, %v; want the sandbox's CA, ending the bundle", cms, err)
	}

	// As the Pod: the allowed host is reached, any other refused, and
	// nothing passes without the token.
	if got := get(t, proxy, "http://allowed.test:"+port+"/"); got != http.StatusOK {
		t.Errorf("the allowed host through the Pod's proxy: %d", got)
	}
	if got := get(t, proxy, "http://other.test:"+port+"/"); got != http.StatusForbidden {
		t.Errorf("a host the policy does not name: %d, want 403", got)
	}
	anonymous := &url.URL{Scheme: "http", Host: proxy.Host}
	if got := get(t, anonymous, "http://allowed.test:"+port+"/"); got != http.StatusProxyAuthRequired {
		t.Errorf("without the token: %d, want 407", got)
	}

	// A gateway started anew lets the running incarnation in again.
	eg.Forget(spec.ID)
	if eg.Attached(ref) {
		t.Fatal("attached after Forget")
	}
	if err := d.AttachEgress(ctx, ref); err != nil {
		t.Fatal(err)
	}
	if got := get(t, proxy, "http://allowed.test:"+port+"/"); got != http.StatusOK {
		t.Errorf("after AttachEgress: %d", got)
	}

	if err := d.Delete(ctx, spec.ID); err != nil {
		t.Fatal(err)
	}
	if cms, err := c.api.CoreV1().ConfigMaps(c.namespace).List(ctx, sel); err != nil || len(cms.Items) != 0 {
		t.Errorf("egress certificates after delete: %v, %v", cms, err)
	}
	if secs, err := c.api.CoreV1().Secrets(c.namespace).List(ctx, sel); err != nil || len(secs.Items) != 0 {
		t.Errorf("egress secrets after delete: %v, %v", secs, err)
	}
}
