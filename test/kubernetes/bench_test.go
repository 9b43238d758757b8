package kubernetes

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/corral-sandbox/corral/internal/driver"
	kube "github.com/corral-sandbox/corral/internal/driver/kubernetes"
	"github.com/corral-sandbox/corral/internal/policy"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

// Create→ready through the kubernetes driver (claim, network policy, Pod,
// wait for its main container to run) beside its nearest peer, a direct
// client-go create of a Pod and a wait for Running, on the same API
// server and played kubelet: the API-side part alone (BenchmarkCreateToReadyOnARealKubelet
// is the whole, on a real node).
func BenchmarkCreateToReady(b *testing.B) {
	rc := StartAPIServer(b)
	c := &cluster{rc: rc}
	c.api, c.namespace = startNamespace(b, rc)
	c.kubelet = StartKubelet(b, c.api, c.namespace)
	benchCreateToReady(b, c.api, c.namespace, c.driver)
}

// BenchmarkCreateToReadyOnARealKubelet is BenchmarkCreateToReady on a
// real kubelet and runtime (testenv.KubeletKubeconfigEnv): the Pods run,
// the driver's with its init container's copy of the supervisor and its
// claim's volume, the direct one without.
func BenchmarkCreateToReadyOnARealKubelet(b *testing.B) {
	n := startRealNode(b)
	benchCreateToReady(b, n.api, n.namespace, n.driver)
}

// benchCreateToReady times both on a namespace. Each run's objects are
// deleted, untimed, so that both see the same number of Pods.
func benchCreateToReady(b *testing.B, api kubernetes.Interface, namespace string, newDriver func(testing.TB, string) *kube.Driver) {
	ctx := context.Background()
	b.Run("driver", func(b *testing.B) {
		d := newDriver(b, "corral.bench."+sandbox.ShortID(sandbox.NewID()))
		for b.Loop() {
			spec := driver.Spec{ID: sandbox.NewID(), Name: "bench", Generation: 1, Image: "corral-test/busybox:latest", Command: []string{"sleep", "3600"}, Policy: policy.Default()}
			if err := d.Create(ctx, spec); err != nil {
				b.Fatal(err)
			}
			if err := d.Start(ctx, driver.Ref{ID: spec.ID, Generation: 1}); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			if err := d.Delete(ctx, spec.ID); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
	})
	b.Run("client-go", func(b *testing.B) {
		pods := api.CoreV1().Pods(namespace)
		for b.Loop() {
			p, err := pods.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "direct-"}, Spec: corev1.PodSpec{
				RestartPolicy:                corev1.RestartPolicyNever,
				AutomountServiceAccountToken: new(false), // as the driver's (no controller here publishes the root CA either)
				Containers: []corev1.Container{{Name: "main", Image: "corral-test/busybox:latest", Command: []string{"sleep", "3600"},
					ImagePullPolicy: corev1.PullNever}},
			}}, metav1.CreateOptions{})
			if err != nil {
				b.Fatal(err)
			}
			for wait := 5 * time.Millisecond; p.Status.Phase != corev1.PodRunning; wait = min(2*wait, 250*time.Millisecond) {
				time.Sleep(wait)
				if p, err = pods.Get(ctx, p.Name, metav1.GetOptions{}); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			if err := pods.Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64(0))}); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
	})
}
