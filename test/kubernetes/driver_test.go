package kubernetes

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/driver/drivertest"
	kube "github.com/corral-sandbox/corral/internal/driver/kubernetes"
	"github.com/corral-sandbox/corral/internal/policy"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

const (
	supervisorImage = "corral-test/supervisor:dev"
	gvisorClass     = GVisorClass
)

// cluster is a real API server with a namespace whose Pod Security
// admission enforces the baseline profile, a RuntimeClass of runsc, and
// a Kubelet playing the node.
type cluster struct {
	rc        *rest.Config
	api       kubernetes.Interface
	namespace string
	kubelet   *Kubelet
}

func startCluster(t *testing.T) *cluster {
	t.Helper()
	rc := StartAPIServer(t)
	api, ns := startNamespace(t, rc)
	return &cluster{rc: rc, api: api, namespace: ns, kubelet: StartKubelet(t, api, ns)}
}

// startNamespace makes a namespace of its own for a test.
func startNamespace(t testing.TB, rc *rest.Config) (kubernetes.Interface, string) {
	ns := "corral-" + sandbox.ShortID(sandbox.NewID())
	return StartNamespace(t, rc, ns), ns
}

func (c *cluster) driver(t testing.TB, label string) *kube.Driver {
	t.Helper()
	d, err := kube.New(driver.Config{Label: label, Gateway: "gw-" + sandbox.ShortID(sandbox.NewID())},
		kube.Options{REST: c.rc, Namespace: c.namespace, SupervisorImage: supervisorImage, GVisorRuntimeClass: gvisorClass})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// apiSide is what the driver does through the API server alone: no
// process runs in the played Pods, so exec and logs are left out.
type apiSide interface {
	driver.Driver
	driver.Watcher
	driver.Validator
	driver.Leftovers
	driver.Tierer
}

// The conformance suite, on a real API server whose node is played.
func TestConformance(t *testing.T) {
	c := startCluster(t)
	drivertest.RunWith(t, func(t *testing.T, label string) driver.Driver {
		return struct{ apiSide }{c.driver(t, label)}
	}, drivertest.Options{InvalidImage: "Not An Image//ref"})
}

// A sandbox's Pod, claim and network policy are what its policy says,
// as the API server stored them (after Pod Security admission).
func TestObjectsAsThePolicySays(t *testing.T) {
	c := startCluster(t)
	d := c.driver(t, "corral.test."+sandbox.ShortID(sandbox.NewID()))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, isolation := range []string{policy.IsolationNamespaces, policy.IsolationGVisor} {
		t.Run(isolation, func(t *testing.T) {
			pol := drivertest.MustPolicy(t, "version: 1\nisolation: "+isolation+"\nlimits:\n  memory: 256Mi\n  cpus: 0.5\n  disk: 2Gi\n")
			spec := driver.Spec{ID: sandbox.NewID(), Name: "pol-" + isolation, Generation: 3, Image: "corral-test/busybox:latest", Command: []string{"sleep", "3600"}, Policy: pol, Labels: map[string]string{"team": "a b"}}
			if err := d.Create(ctx, spec); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { d.Delete(context.Background(), spec.ID) })
			if err := d.Start(ctx, driver.Ref{ID: spec.ID, Generation: 3}); err != nil {
				t.Fatal(err)
			}
			obj, err := d.Inspect(ctx, spec.ID)
			if err != nil || obj.State != driver.StateRunning || obj.Labels["team"] != "a b" {
				t.Fatalf("inspect: %+v, %v; want running with the sandbox's own labels", obj, err)
			}
			sel := driver.LabelSandboxID + "=" + spec.ID
			pods, err := c.api.CoreV1().Pods(c.namespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
			if err != nil || len(pods.Items) != 1 {
				t.Fatalf("pods of the sandbox: %v, %v; want one", pods, err)
			}
			p := pods.Items[0]
			var problems []string
			check := func(ok bool, format string, args ...any) {
				if !ok {
					problems = append(problems, fmt.Sprintf(format, args...))
				}
			}
			check(p.Labels[driver.LabelGeneration] == "3" && p.Labels[d.Label()] == "true", "labels %v", p.Labels)
			check(p.Spec.RestartPolicy == corev1.RestartPolicyNever, "restartPolicy %s", p.Spec.RestartPolicy)
			check(p.Spec.AutomountServiceAccountToken != nil && !*p.Spec.AutomountServiceAccountToken, "a service account token is mounted")
			check(!p.Spec.HostNetwork && !p.Spec.HostPID && !p.Spec.HostIPC, "a host namespace is shared")
			if isolation == policy.IsolationGVisor {
				check(p.Spec.RuntimeClassName != nil && *p.Spec.RuntimeClassName == gvisorClass, "runtimeClassName %v", p.Spec.RuntimeClassName)
			} else {
				check(p.Spec.RuntimeClassName == nil, "runtimeClassName %v", p.Spec.RuntimeClassName)
			}
			check(len(p.Spec.InitContainers) == 1 && p.Spec.InitContainers[0].Image == supervisorImage, "init containers %v", p.Spec.InitContainers)
			main := p.Spec.Containers[0]
			sc := main.SecurityContext
			check(sc != nil && sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation, "privilege escalation allowed")
			check(sc != nil && sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem, "root file system writable")
			check(sc != nil && sc.Privileged != nil && !*sc.Privileged, "privileged")
			check(sc != nil && sc.SeccompProfile != nil && sc.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault, "seccomp %v", sc.SeccompProfile)
			check(sc != nil && sc.Capabilities != nil && slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) &&
				!slices.Contains(sc.Capabilities.Add, "SYS_ADMIN") && !slices.Contains(sc.Capabilities.Add, "NET_RAW") && slices.Contains(sc.Capabilities.Add, "SETUID"),
				"capabilities %v", sc.Capabilities)
			check(main.Resources.Limits.Memory().Value() == 256<<20 && main.Resources.Limits.Cpu().MilliValue() == 500, "limits %v", main.Resources.Limits)
			check(strings.HasPrefix(strings.Join(main.Command, " "), "/.corral/bin/corral-supervise supervise --ready-file /.corral/run/ready -- sleep 3600"), "command %q", main.Command)
			check(slices.ContainsFunc(main.Env, func(e corev1.EnvVar) bool { return strings.Contains(e.Value, `"run_as_user":1000`) }), "the policy's user is not in the supervisor's policy: %v", main.Env)
			claims, err := c.api.CoreV1().PersistentVolumeClaims(c.namespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
			check(err == nil && len(claims.Items) == 1 && claims.Items[0].Spec.Resources.Requests.Storage().Value() == 2<<30, "claims %v, %v", claims, err)
			nps, err := c.api.NetworkingV1().NetworkPolicies(c.namespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
			if check(err == nil && len(nps.Items) == 1, "network policies %v, %v", nps, err); err == nil && len(nps.Items) == 1 {
				np := nps.Items[0].Spec
				check(np.PodSelector.MatchLabels[driver.LabelSandboxID] == spec.ID, "network policy selects %v", np.PodSelector)
				check(len(np.PolicyTypes) == 2 && len(np.Egress) == 0 && len(np.Ingress) == 0, "network policy lets something through: %+v", np)
			}
			for _, p := range problems {
				t.Error(p)
			}
		})
	}
}

// A Pod whose main process ends is stopped with its exit code; a start
// runs a new Pod of the same incarnation, the ended one removed.
func TestExitAndStartAgain(t *testing.T) {
	c := startCluster(t)
	d := c.driver(t, "corral.test."+sandbox.ShortID(sandbox.NewID()))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	spec := driver.Spec{ID: sandbox.NewID(), Name: "exits", Generation: 1, Image: "corral-test/busybox:latest", Command: []string{"true"}, Policy: policy.Default()}
	if err := d.Create(ctx, spec); err != nil {
		t.Fatal(err)
	}
	ref := driver.Ref{ID: spec.ID, Generation: 1}
	if err := d.Start(ctx, ref); err != nil {
		t.Fatal(err)
	}
	pods, _ := c.api.CoreV1().Pods(c.namespace).List(ctx, metav1.ListOptions{LabelSelector: driver.LabelSandboxID + "=" + spec.ID})
	first := pods.Items[0].Name
	c.kubelet.Exit(first, 3)
	waitState(t, d, spec.ID, driver.StateStopped, 3)
	if err := d.Start(ctx, ref); err != nil {
		t.Fatal(err)
	}
	waitState(t, d, spec.ID, driver.StateRunning, 0)
	pods, _ = c.api.CoreV1().Pods(c.namespace).List(ctx, metav1.ListOptions{LabelSelector: driver.LabelSandboxID + "=" + spec.ID})
	if len(pods.Items) != 1 || pods.Items[0].Name == first {
		t.Errorf("pods after the second start: %d (first %s); want one new one", len(pods.Items), first)
	}
	if err := d.Stop(ctx, ref, driver.StopOptions{Timeout: time.Second}); err != nil {
		t.Fatal(err)
	}
	waitState(t, d, spec.ID, driver.StateStopped, 143)
	if err := d.Delete(ctx, spec.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Inspect(ctx, spec.ID); err == nil {
		t.Error("the sandbox is still there after its delete")
	}
}

func waitState(t *testing.T, d driver.Driver, id string, state driver.State, code int) {
	t.Helper()
	var obj driver.Object
	var err error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if obj, err = d.Inspect(context.Background(), id); err == nil && obj.State == state && obj.ExitCode == code {
			return
		}
	}
	t.Fatalf("sandbox %s: %+v, %v; want %s with exit code %d", id, obj, err, state, code)
}
