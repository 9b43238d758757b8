package kubernetes

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/kubernetes/test/utils/ktesting"
)

// Kubelet plays the part of a node's kubelet (and of the scheduler) on a
// real API server where none runs: it binds every new Pod of its namespace
// to its node, reports its init containers done and its main containers
// running, and, when a Pod is deleted, reports its containers ended by
// the kill (exit code 143, 137 without a grace period) and removes it.
// It also releases deleted claims no Pod uses, as the controller
// manager's claim protection does. Exit makes a Pod's main process end
// with a code. It runs no process:
// what runs inside a Pod (the supervisor, execs, logs) is not covered.
type Kubelet struct {
	api       kubernetes.Interface
	namespace string
	node      string

	mu    sync.Mutex
	exits map[string]int32 // by Pod name: main processes to end, with their code
	down  bool             // while true, the kubelet does nothing (a node cut off)
}

// StartKubelet starts a kubelet for namespace, stopped when the test ends.
func StartKubelet(t ktesting.TB, api kubernetes.Interface, namespace string) *Kubelet {
	k := &Kubelet{api: api, namespace: namespace, node: "corral-test-node", exits: map[string]int32{}}
	repeat(t, 10*time.Millisecond, k.pass)
	return k
}

// Exit ends the main process of Pod name with code.
func (k *Kubelet) Exit(name string, code int32) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.exits[name] = code
}

// Pause stops (true) or resumes the kubelet's work.
func (k *Kubelet) Pause(down bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.down = down
}

// pass brings every Pod of the namespace one step on.
func (k *Kubelet) pass(ctx context.Context) {
	k.mu.Lock()
	down := k.down
	k.mu.Unlock()
	if down {
		return
	}
	pods, err := k.api.CoreV1().Pods(k.namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return // the API server is away: the next pass tries again
	}
	inUse := map[string]bool{}
	for i := range pods.Items {
		k.step(ctx, &pods.Items[i])
		for _, v := range pods.Items[i].Spec.Volumes {
			if v.PersistentVolumeClaim != nil {
				inUse[v.PersistentVolumeClaim.ClaimName] = true
			}
		}
	}
	k.releaseClaims(ctx, inUse)
}

// releaseClaims plays the controller manager's claim protection: a
// deleted claim no Pod uses loses its finalizer, and so goes.
func (k *Kubelet) releaseClaims(ctx context.Context, inUse map[string]bool) {
	claims, err := k.api.CoreV1().PersistentVolumeClaims(k.namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	for _, c := range claims.Items {
		if c.DeletionTimestamp != nil && !inUse[c.Name] {
			releaseClaim(ctx, k.api, c)
		}
	}
}

// releaseClaim drops a deleted claim's finalizers (claim protection's),
// so that it goes.
func releaseClaim(ctx context.Context, api kubernetes.Interface, c corev1.PersistentVolumeClaim) {
	if len(c.Finalizers) > 0 {
		c.Finalizers = nil
		_, _ = api.CoreV1().PersistentVolumeClaims(c.Namespace).Update(ctx, &c, metav1.UpdateOptions{})
	}
}

func (k *Kubelet) step(ctx context.Context, p *corev1.Pod) {
	pods := k.api.CoreV1().Pods(k.namespace)
	switch {
	case p.Spec.NodeName == "" && p.DeletionTimestamp == nil:
		b := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: p.Name, UID: p.UID}, Target: corev1.ObjectReference{Kind: "Node", Name: k.node}}
		_ = pods.Bind(ctx, b, metav1.CreateOptions{})
	case p.DeletionTimestamp != nil:
		code := int32(143)
		if p.DeletionGracePeriodSeconds != nil && *p.DeletionGracePeriodSeconds == 0 {
			code = 137
		}
		if running(p) {
			k.end(ctx, p, code)
		}
		uid := p.UID
		_ = pods.Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64(0)), Preconditions: &metav1.Preconditions{UID: &uid}})
	case p.Status.Phase == "" || p.Status.Phase == corev1.PodPending:
		k.run(ctx, p)
	case p.Status.Phase == corev1.PodRunning:
		k.mu.Lock()
		code, ok := k.exits[p.Name]
		delete(k.exits, p.Name)
		k.mu.Unlock()
		if ok {
			k.end(ctx, p, code)
		}
	}
}

func running(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning }

// run reports the Pod's init containers done and its containers running.
func (k *Kubelet) run(ctx context.Context, p *corev1.Pod) {
	now := metav1.Now()
	p.Status.Phase = corev1.PodRunning
	p.Status.HostIP, p.Status.PodIP = "127.0.0.1", "10.88.0.2"
	p.Status.StartTime = &now
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now}}
	p.Status.InitContainerStatuses = nil
	for _, c := range p.Spec.InitContainers {
		p.Status.InitContainerStatuses = append(p.Status.InitContainerStatuses, corev1.ContainerStatus{Name: c.Name, Image: c.Image, ImageID: c.Image,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", StartedAt: now, FinishedAt: now}}})
	}
	p.Status.ContainerStatuses = nil
	for _, c := range p.Spec.Containers {
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{Name: c.Name, Image: c.Image, ImageID: c.Image, Ready: true, Started: new(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}})
	}
	k.updateStatus(ctx, p)
}

// end reports the Pod's containers ended with code.
func (k *Kubelet) end(ctx context.Context, p *corev1.Pod, code int32) {
	now := metav1.Now()
	p.Status.Phase = corev1.PodFailed
	if code == 0 {
		p.Status.Phase = corev1.PodSucceeded
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: now}}
	for i := range p.Status.ContainerStatuses {
		st := &p.Status.ContainerStatuses[i]
		st.Ready, st.Started = false, new(false)
		st.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: "Error", FinishedAt: now}}
	}
	k.updateStatus(ctx, p)
}

func (k *Kubelet) updateStatus(ctx context.Context, p *corev1.Pod) {
	_, err := k.api.CoreV1().Pods(k.namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{})
	if err != nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
		return // the next pass tries again
	}
}
