package kubernetes

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// The API server validates what it is given, as a cluster does: a Pod is
// stored with its labels and securityContext, and one without containers
// is refused. (client-go's fake clientset would take both.)
func TestAPIServerValidates(t *testing.T) {
	start := time.Now()
	cs := kubernetes.NewForConfigOrDie(StartAPIServer(t))
	t.Logf("etcd and the API server up in %v", time.Since(start).Round(time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nonRoot, uid := true, int64(1000)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "sb-1", Namespace: "default", Labels: map[string]string{"corral.managed": "true"}},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{
			Name: "sandbox", Image: "busybox", SecurityContext: &corev1.SecurityContext{RunAsNonRoot: &nonRoot, RunAsUser: &uid},
		}}},
	}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := cs.CoreV1().Pods("default").Get(ctx, "sb-1", metav1.GetOptions{})
	if err != nil || got.Labels["corral.managed"] != "true" || *got.Spec.Containers[0].SecurityContext.RunAsUser != 1000 || got.Spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Fatalf("the stored Pod: %+v, %v", got, err)
	}
	empty := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "sb-2", Namespace: "default"}}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, empty, metav1.CreateOptions{}); !apierrors.IsInvalid(err) {
		t.Errorf("a Pod without containers: %v; want Invalid", err)
	}
}
