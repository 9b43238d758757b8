package kubernetes

import (
	"context"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/kubernetes/test/utils/ktesting"
)

// StartControllers plays, for a real kubelet's namespace, the parts of a
// control plane that do not run here: the scheduler (each new Pod bound
// to the one node that is ready), the volume binder (each new claim bound
// to a hostPath volume of its own under volumes, as a local provisioner
// would make) and claim protection (a deleted claim no Pod uses goes, its
// volume with it). They stop when t ends.
func StartControllers(t ktesting.TB, api kubernetes.Interface, namespace, volumes string) {
	c := &controllers{api: api, namespace: namespace, volumes: volumes}
	repeat(t, 50*time.Millisecond, c.pass)
}

// repeat calls pass every interval until t ends.
func repeat(t ktesting.TB, every time.Duration, pass func(context.Context)) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			pass(ctx)
			select {
			case <-ctx.Done():
			case <-time.After(every):
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
}

type controllers struct {
	api       kubernetes.Interface
	namespace string
	volumes   string
}

func (c *controllers) pass(ctx context.Context) {
	pods, err := c.api.CoreV1().Pods(c.namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return // the API server is away: the next pass tries again
	}
	node := c.readyNode(ctx)
	inUse := map[string]bool{}
	for _, p := range pods.Items {
		if p.Spec.NodeName == "" && p.DeletionTimestamp == nil && node != "" {
			b := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: p.Name, UID: p.UID}, Target: corev1.ObjectReference{Kind: "Node", Name: node}}
			_ = c.api.CoreV1().Pods(c.namespace).Bind(ctx, b, metav1.CreateOptions{})
		}
		for _, v := range p.Spec.Volumes {
			if v.PersistentVolumeClaim != nil {
				inUse[v.PersistentVolumeClaim.ClaimName] = true
			}
		}
	}
	claims, err := c.api.CoreV1().PersistentVolumeClaims(c.namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	for _, claim := range claims.Items {
		switch {
		case claim.DeletionTimestamp != nil && !inUse[claim.Name]:
			c.release(ctx, claim)
		case claim.DeletionTimestamp == nil && claim.Spec.VolumeName == "":
			c.bind(ctx, claim)
		}
	}
}

// readyNode is the name of a ready node, "" while none is.
func (c *controllers) readyNode(ctx context.Context) string {
	nodes, err := c.api.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return ""
	}
	for _, n := range nodes.Items {
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
				return n.Name
			}
		}
	}
	return ""
}

// volumeName is the name of claim's volume.
func volumeName(claim corev1.PersistentVolumeClaim) string { return "corral-test-" + string(claim.UID) }

// bind makes claim's volume, a directory under c.volumes, and binds them.
func (c *controllers) bind(ctx context.Context, claim corev1.PersistentVolumeClaim) {
	dirType := corev1.HostPathDirectoryOrCreate
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: volumeName(claim)},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: claim.Spec.Resources.Requests[corev1.ResourceStorage]},
			AccessModes:                   claim.Spec.AccessModes,
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{
				Path: filepath.Join(c.volumes, string(claim.UID)), Type: &dirType}},
			ClaimRef: &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: claim.Namespace, Name: claim.Name, UID: claim.UID},
		},
	}
	if claim.Spec.StorageClassName != nil {
		pv.Spec.StorageClassName = *claim.Spec.StorageClassName
	}
	if _, err := c.api.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return
	}
	if made, err := c.api.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{}); err == nil {
		made.Status.Phase = corev1.VolumeBound
		_, _ = c.api.CoreV1().PersistentVolumes().UpdateStatus(ctx, made, metav1.UpdateOptions{})
	}
	claim.Spec.VolumeName = pv.Name
	bound, err := c.api.CoreV1().PersistentVolumeClaims(c.namespace).Update(ctx, &claim, metav1.UpdateOptions{})
	if err != nil {
		return
	}
	bound.Status.Phase = corev1.ClaimBound
	bound.Status.AccessModes = claim.Spec.AccessModes
	bound.Status.Capacity = pv.Spec.Capacity
	_, _ = c.api.CoreV1().PersistentVolumeClaims(c.namespace).UpdateStatus(ctx, bound, metav1.UpdateOptions{})
}

// release lets a deleted claim go, and its volume and directory.
func (c *controllers) release(ctx context.Context, claim corev1.PersistentVolumeClaim) {
	pvs := c.api.CoreV1().PersistentVolumes()
	if pv, err := pvs.Get(ctx, volumeName(claim), metav1.GetOptions{}); err == nil {
		pv.Finalizers = nil
		if _, err := pvs.Update(ctx, pv, metav1.UpdateOptions{}); err == nil {
			_ = pvs.Delete(ctx, pv.Name, metav1.DeleteOptions{})
		}
		os.RemoveAll(filepath.Join(c.volumes, string(claim.UID)))
	}
	releaseClaim(ctx, c.api, claim)
}
