package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/retry"

	"github.com/corral-sandbox/corral/internal/control"
	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/errdefs"
)

// Create implements driver.Driver: the claim (recording the incarnation)
// and the NetworkPolicy; no Pod runs until Start.
func (d *Driver) Create(ctx context.Context, spec driver.Spec) error {
	if err := d.Validate(spec); err != nil {
		return err
	}
	var env map[string]string // the egress variables: in the Pod by name, in its Secret by value
	if d.opts.Egress != nil {
		var err error
		if env, err = d.egressEnv(spec); err != nil {
			return err
		}
	}
	pod := d.podFor(spec, slices.Sorted(maps.Keys(env)))
	c, err := d.claim(ctx, spec.ID)
	switch {
	case errors.Is(err, errdefs.ErrNotFound):
		if c, err = d.claimFor(spec, pod); err != nil {
			return err
		}
		if err := d.createClaim(ctx, c); err != nil {
			return err
		}
	case err != nil:
		return err
	case generation(c.Labels) == spec.Generation:
		// adopt
	default:
		pods, err := d.pods(ctx, spec.ID)
		if err != nil {
			return err
		}
		for _, p := range pods {
			if active(&p) {
				return errdefs.FailedPrecondition("pod %s of sandbox %s still runs generation %d", p.Name, spec.ID, generation(p.Labels))
			}
		}
		if err := d.deletePods(ctx, pods); err != nil {
			return err
		}
		if err := d.updateClaim(ctx, c, func(c *corev1.PersistentVolumeClaim) error { return d.record(c, spec, pod) }); err != nil {
			return d.wrap(err, "record generation "+strconv.FormatInt(spec.Generation, 10)+" of sandbox "+spec.Name)
		}
	}
	if d.opts.Egress != nil {
		if err := d.ensureTrust(ctx, spec); err != nil {
			return err
		}
		if err := d.ensureEnvSecret(ctx, spec, env); err != nil {
			return err
		}
	}
	return d.ensureNetworkPolicy(ctx, spec)
}

// ensureNetworkPolicy creates sandbox spec's NetworkPolicy, or brings one
// an earlier incarnation left to what this one needs (the gateway's
// proxy may have moved).
func (d *Driver) ensureNetworkPolicy(ctx context.Context, spec driver.Spec) error {
	want := d.networkPolicyFor(spec)
	nps := d.api.NetworkingV1().NetworkPolicies(d.opts.Namespace)
	_, err := nps.Create(ctx, want, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		return d.wrap(err, "create the network policy of sandbox "+spec.Name)
	}
	cur, err := nps.Get(ctx, want.Name, metav1.GetOptions{})
	if err != nil {
		return d.wrap(err, "get the network policy of sandbox "+spec.Name)
	}
	if equality.Semantic.DeepEqual(cur.Spec, want.Spec) {
		return nil
	}
	cur.Spec = want.Spec
	_, err = nps.Update(ctx, cur, metav1.UpdateOptions{})
	return d.wrap(err, "update the network policy of sandbox "+spec.Name)
}

// createClaim creates a sandbox's claim: one a create whose answer was
// lost made is adopted; one of an earlier life of the id, still being
// deleted (its volume released first), is waited for.
func (d *Driver) createClaim(ctx context.Context, c *corev1.PersistentVolumeClaim) error {
	claims := d.api.CoreV1().PersistentVolumeClaims(d.opts.Namespace)
	for wait := 5 * time.Millisecond; ; wait = min(2*wait, 250*time.Millisecond) {
		_, err := claims.Create(ctx, c, metav1.CreateOptions{})
		if !apierrors.IsAlreadyExists(err) {
			return d.wrap(err, "create claim "+c.Name)
		}
		old, err := claims.Get(ctx, c.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return d.wrap(err, "get claim "+c.Name)
		case old.DeletionTimestamp == nil:
			return nil // adopt
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("claim %s of an earlier life of the sandbox is still being deleted: %w", c.Name, ctx.Err())
		case <-time.After(wait):
		}
	}
}

// active tells whether a Pod runs or is yet to run (not ended).
func active(p *corev1.Pod) bool {
	return p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}

// deletePods deletes Pods that ended, at once.
func (d *Driver) deletePods(ctx context.Context, pods []corev1.Pod) error {
	for _, p := range pods {
		err := d.api.CoreV1().Pods(d.opts.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64(0))})
		if err != nil && !apierrors.IsNotFound(err) {
			return d.wrap(err, "delete pod "+p.Name)
		}
	}
	return nil
}

// Start implements driver.Driver: a Pod from the incarnation's template
// (a Pod that ended is replaced by a new one), then it waits until the
// Pod's main container runs.
func (d *Driver) Start(ctx context.Context, ref driver.Ref) error {
	c, err := d.claim(ctx, ref.ID)
	if err != nil {
		return err
	}
	if g := generation(c.Labels); g != ref.Generation {
		return errdefs.FailedPrecondition("sandbox %s is at generation %d, not %d", ref.ID, g, ref.Generation)
	}
	pods, err := d.pods(ctx, ref.ID)
	if err != nil {
		return err
	}
	var ended []corev1.Pod
	for _, p := range pods {
		switch {
		case generation(p.Labels) == ref.Generation && active(&p) && p.DeletionTimestamp == nil:
			return d.waitRunning(ctx, p.Name)
		case p.DeletionTimestamp != nil && active(&p):
			return errdefs.FailedPrecondition("pod %s of sandbox %s is still being stopped", p.Name, ref.ID)
		}
		ended = append(ended, p)
	}
	if err := d.deletePods(ctx, ended); err != nil {
		return err
	}
	var pod corev1.Pod
	if err := json.Unmarshal([]byte(c.Annotations[annPod]), &pod); err != nil {
		return fmt.Errorf("the claim of sandbox %s holds no pod of its incarnation: %w", ref.ID, err)
	}
	err = d.updateClaim(ctx, c, func(c *corev1.PersistentVolumeClaim) error {
		if g := generation(c.Labels); g != ref.Generation {
			return errdefs.FailedPrecondition("sandbox %s is at generation %d, not %d", ref.ID, g, ref.Generation)
		}
		c.Annotations[annStarted] = "true"
		delete(c.Annotations, annExit)
		delete(c.Annotations, annExitNote)
		return nil
	})
	if err != nil {
		return d.wrap(err, "record the start of sandbox "+ref.ID)
	}
	if d.opts.Egress != nil { // its token is let in before the Pod can send it
		if err := d.opts.Egress.Admit(ctx, ref); err != nil {
			return err
		}
	}
	made, err := d.api.CoreV1().Pods(d.opts.Namespace).Create(ctx, &pod, metav1.CreateOptions{})
	if err != nil {
		return d.wrap(err, "create pod for sandbox "+ref.ID)
	}
	return d.waitRunning(ctx, made.Name)
}

// waitRunning waits until the main container of a Pod runs, or says why
// it ended first.
func (d *Driver) waitRunning(ctx context.Context, name string) error {
	wait := 5 * time.Millisecond
	for {
		p, err := d.api.CoreV1().Pods(d.opts.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return d.wrap(err, "get pod "+name)
		}
		if st := mainStatus(p); st != nil && st.State.Running != nil {
			return nil
		}
		if !active(p) {
			if st := mainStatus(p); st != nil && st.State.Terminated != nil {
				t := st.State.Terminated
				if t.ExitCode == 126 || t.ExitCode == 127 {
					if t.Message != "" {
						return errdefs.InvalidArgument("the sandbox's command cannot run: %s", control.Printable(t.Message))
					}
				}
				return nil // it ran, and is done already
			}
			return fmt.Errorf("pod %s ended before its main process started: %s", name, why(p))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for pod %s to run (%s): %w", name, why(p), ctx.Err())
		case <-time.After(wait):
		}
		wait = min(2*wait, 250*time.Millisecond)
	}
}

// mainStatus is the status of a Pod's main container, nil before the
// kubelet reports one.
func mainStatus(p *corev1.Pod) *corev1.ContainerStatus {
	for i := range p.Status.ContainerStatuses {
		if p.Status.ContainerStatuses[i].Name == mainContainer {
			return &p.Status.ContainerStatuses[i]
		}
	}
	return nil
}

// why says what is known of a Pod that does not run: its phase, and the
// reasons its conditions and containers give.
func why(p *corev1.Pod) string {
	s := "phase " + string(p.Status.Phase)
	if p.Status.Phase == "" {
		s = "not yet seen by a kubelet"
	}
	if p.Status.Reason != "" || p.Status.Message != "" {
		s += ": " + p.Status.Reason + " " + p.Status.Message
	}
	for _, c := range p.Status.Conditions {
		if c.Status != corev1.ConditionTrue && c.Reason != "" {
			s += "; " + string(c.Type) + ": " + c.Reason + " " + c.Message
			break
		}
	}
	for _, st := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
		if w := st.State.Waiting; w != nil && w.Reason != "" {
			s += "; container " + st.Name + ": " + w.Reason + " " + w.Message
		}
	}
	return control.Printable(s)
}

// Stop implements driver.Driver: the sandbox's running Pods are deleted
// with the timeout as their grace period (the kubelet sends SIGTERM, then
// SIGKILL), and it waits until they are gone, keeping the exit code seen.
func (d *Driver) Stop(ctx context.Context, ref driver.Ref, opts driver.StopOptions) error {
	pods, err := d.pods(ctx, ref.ID)
	if err != nil {
		return err
	}
	grace := int64(max(opts.Timeout.Seconds(), 1))
	if opts.Force {
		grace = 0
	}
	for _, p := range pods {
		if !active(&p) {
			continue
		}
		err := d.api.CoreV1().Pods(d.opts.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &grace})
		if err != nil && !apierrors.IsNotFound(err) {
			return d.wrap(err, "delete pod "+p.Name)
		}
		if err := d.waitGone(ctx, ref.ID, p.Name); err != nil {
			return err
		}
	}
	return nil
}

// waitGone waits until a deleted Pod is gone, watching it so that the
// exit code its main container reports on the way is seen, and records
// that code on the claim.
func (d *Driver) waitGone(ctx context.Context, id, name string) error {
	code, note := 137, "the pod was deleted before its kubelet reported an exit code"
	seen := func(p *corev1.Pod) bool {
		if st := mainStatus(p); st != nil && st.State.Terminated != nil {
			code, note = int(st.State.Terminated.ExitCode), ""
			return !active(p) // ended: it stays, for its exit code, until the next start
		}
		return false
	}
	pods := d.api.CoreV1().Pods(d.opts.Namespace)
	for gone := false; !gone; {
		p, err := pods.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			break
		}
		if err != nil {
			return d.wrap(err, "get pod "+name)
		}
		if seen(p) {
			break
		}
		w, err := pods.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name, ResourceVersion: p.ResourceVersion})
		if err != nil {
			return d.wrap(err, "watch pod "+name)
		}
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue // an error event: watch again
			}
			if ev.Type == watch.Deleted || seen(p) {
				seen(p)
				gone = true
				break
			}
		}
		w.Stop()
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("waiting for pod %s to stop: %w", name, err)
		}
	}
	c, err := d.claim(ctx, id)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	err = d.updateClaim(ctx, c, func(c *corev1.PersistentVolumeClaim) error {
		c.Annotations[annExit] = strconv.Itoa(code)
		c.Annotations[annExitNote] = note
		return nil
	})
	return d.wrap(err, "record the exit of sandbox "+id)
}

// updateClaim applies change to a claim and writes it, again on a newer
// version of it when another writer (the cluster's volume binder, which
// binds a new claim) wrote it meanwhile.
func (d *Driver) updateClaim(ctx context.Context, c *corev1.PersistentVolumeClaim, change func(*corev1.PersistentVolumeClaim) error) error {
	claims := d.api.CoreV1().PersistentVolumeClaims(d.opts.Namespace)
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		if err := change(c); err != nil {
			return err
		}
		_, err := claims.Update(ctx, c, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			fresh, gerr := claims.Get(ctx, c.Name, metav1.GetOptions{})
			if gerr != nil {
				return gerr
			}
			if fresh.Annotations == nil {
				fresh.Annotations = map[string]string{}
			}
			*c = *fresh
		}
		return err
	})
}

// Delete implements driver.Driver: every Pod at once, the network
// policy, the egress certificates and secret, and the claim (its volume goes as the storage class says).
func (d *Driver) Delete(ctx context.Context, id string) error {
	pods, err := d.pods(ctx, id)
	if err != nil {
		return err
	}
	if err := d.deletePods(ctx, pods); err != nil {
		return err
	}
	ns, name := d.opts.Namespace, d.claimName(id)
	for _, o := range []struct {
		what   string
		delete func(context.Context, string, metav1.DeleteOptions) error
	}{
		{"the network policy", d.api.NetworkingV1().NetworkPolicies(ns).Delete},
		{"the egress certificates", d.api.CoreV1().ConfigMaps(ns).Delete},
		{"the egress secret", d.api.CoreV1().Secrets(ns).Delete},
		{"the claim", d.api.CoreV1().PersistentVolumeClaims(ns).Delete}, // last: it is the record
	} {
		if err := o.delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return d.wrap(err, "delete "+o.what+" of sandbox "+id)
		}
	}
	return nil
}

// Inspect implements driver.Driver.
func (d *Driver) Inspect(ctx context.Context, id string) (driver.Object, error) {
	objs, err := d.objects(ctx, id)
	if err != nil {
		return driver.Object{}, err
	}
	if len(objs) == 0 {
		return driver.Object{}, errdefs.NotFound("no claim or pod for sandbox %s", id)
	}
	return objs[0], nil
}

// List implements driver.Driver.
func (d *Driver) List(ctx context.Context) ([]driver.Object, error) {
	return d.objects(ctx, "")
}

// objects are the sandboxes (one when id is set) as their claims record
// them and their Pods show them; a Pod without a claim is an object too
// (what a delete cut short left), so the orphan collection sees it.
func (d *Driver) objects(ctx context.Context, id string) ([]driver.Object, error) {
	pods, err := d.pods(ctx, id)
	if err != nil {
		return nil, err
	}
	claims, err := d.claims(ctx, id)
	if err != nil {
		return nil, err
	}
	newest := map[string]*corev1.Pod{}
	for i := range pods {
		if sid := pods[i].Labels[driver.LabelSandboxID]; newest[sid] == nil {
			newest[sid] = &pods[i]
		}
	}
	var objs []driver.Object
	for i := range claims {
		c := &claims[i]
		sid := c.Labels[driver.LabelSandboxID]
		obj := driver.Object{ID: sid, Generation: generation(c.Labels), State: driver.StateCreated, Labels: recordedLabels(c.Annotations, c.Labels)}
		if p := newest[sid]; p != nil && generation(p.Labels) == obj.Generation {
			podState(&obj, p)
		} else if c.Annotations[annStarted] == "true" {
			obj.State = driver.StateStopped
			obj.ExitCode, _ = strconv.Atoi(c.Annotations[annExit])
			obj.Message = c.Annotations[annExitNote]
		}
		delete(newest, sid)
		objs = append(objs, obj)
	}
	for sid, p := range newest {
		obj := driver.Object{ID: sid, Generation: generation(p.Labels), Labels: p.Labels}
		podState(&obj, p)
		obj.Message = "pod " + p.Name + " has no claim: " + obj.Message
		objs = append(objs, obj)
	}
	return objs, nil
}

// recordedLabels are the labels a claim recorded, or its own.
func recordedLabels(ann, own map[string]string) map[string]string {
	var l map[string]string
	if json.Unmarshal([]byte(ann[annLabels]), &l) != nil || l == nil {
		return own
	}
	return l
}

// podState sets obj's state from its Pod.
func podState(obj *driver.Object, p *corev1.Pod) {
	st := mainStatus(p)
	switch {
	case st != nil && st.State.Terminated != nil:
		obj.State, obj.ExitCode = driver.StateStopped, int(st.State.Terminated.ExitCode)
	case !active(p):
		obj.State, obj.Message = driver.StateFailed, "pod "+p.Name+" ended without an exit code: "+why(p)
	case st != nil && st.State.Running != nil:
		obj.State = driver.StateRunning
	case p.DeletionTimestamp != nil:
		obj.State, obj.Message = driver.StateStopped, "pod "+p.Name+" was deleted before it ran"
	default:
		obj.State, obj.Message = driver.StateCreated, "pod "+p.Name+" is not running yet: "+why(p)
	}
}

// Leftovers implements driver.Leftovers: the network policies, egress
// certificates and egress secrets of sandboxes with neither claim nor Pod (a delete cut
// short between them).
func (d *Driver) Leftovers(ctx context.Context, compute []driver.Object) ([]driver.Object, error) {
	opts := metav1.ListOptions{LabelSelector: d.selector("")}
	nps, err := d.api.NetworkingV1().NetworkPolicies(d.opts.Namespace).List(ctx, opts)
	if err != nil {
		return nil, d.wrap(err, "list network policies")
	}
	maps, err := d.api.CoreV1().ConfigMaps(d.opts.Namespace).List(ctx, opts)
	if err != nil {
		return nil, d.wrap(err, "list config maps")
	}
	secrets, err := d.api.CoreV1().Secrets(d.opts.Namespace).List(ctx, opts)
	if err != nil {
		return nil, d.wrap(err, "list secrets")
	}
	known := map[string]bool{}
	for _, o := range compute {
		known[o.ID] = true
	}
	var left []driver.Object
	add := func(kind string, meta metav1.ObjectMeta) {
		if sid := meta.Labels[driver.LabelSandboxID]; !known[sid] {
			known[sid] = true
			left = append(left, driver.Object{ID: sid, State: driver.StateStopped, Labels: meta.Labels, Message: kind + " " + meta.Name + " left without its sandbox's claim"})
		}
	}
	for _, np := range nps.Items {
		add("network policy", np.ObjectMeta)
	}
	for _, cm := range maps.Items {
		add("config map", cm.ObjectMeta)
	}
	for _, sec := range secrets.Items {
		add("secret", sec.ObjectMeta)
	}
	return left, nil
}
