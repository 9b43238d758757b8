package kubernetes

import (
	"encoding/json"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/policy"
	"github.com/corral-sandbox/corral/internal/supervisor"
)

// DefaultClaimBytes is the size asked for a sandbox's /sandbox when its
// policy sets no limits.disk.
const DefaultClaimBytes = 1 << 30

// selectable are the labels that go on the API objects themselves (for
// selectors); every label of a sandbox is kept in annLabels, since a
// sandbox's own labels need not be valid Kubernetes labels.
func (d *Driver) selectable(spec driver.Spec) map[string]string {
	l := map[string]string{
		d.cfg.Label:            "true",
		driver.LabelSandboxID:  spec.ID,
		driver.LabelGeneration: strconv.FormatInt(spec.Generation, 10),
	}
	if d.cfg.Gateway != "" {
		l[driver.LabelGateway] = d.cfg.Gateway
	}
	return l
}

// claimFor is the claim of a new sandbox, recording spec's incarnation.
func (d *Driver) claimFor(spec driver.Spec, pod *corev1.Pod) (*corev1.PersistentVolumeClaim, error) {
	size := spec.Policy.Limits.DiskBytes
	if size == 0 {
		size = DefaultClaimBytes
	}
	c := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: d.claimName(spec.ID), Labels: d.selectable(spec)},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceStorage: *resource.NewQuantity(size, resource.BinarySI),
			}},
		},
	}
	if d.opts.StorageClass != "" {
		c.Spec.StorageClassName = &d.opts.StorageClass
	}
	return c, d.record(c, spec, pod)
}

// record writes spec's incarnation into a claim: its generation, its
// labels and its Pod; how an earlier one ended is forgotten.
func (d *Driver) record(c *corev1.PersistentVolumeClaim, spec driver.Spec, pod *corev1.Pod) error {
	podJSON, err := json.Marshal(pod)
	if err != nil {
		return err
	}
	labelsJSON, err := json.Marshal(d.cfg.ObjectLabels(spec))
	if err != nil {
		return err
	}
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	gen := strconv.FormatInt(spec.Generation, 10)
	c.Labels[driver.LabelGeneration] = gen
	c.Annotations[annGeneration] = gen
	c.Annotations[annPod] = string(podJSON)
	c.Annotations[annLabels] = string(labelsJSON)
	delete(c.Annotations, annStarted)
	delete(c.Annotations, annExit)
	delete(c.Annotations, annExitNote)
	return nil
}

// podFor is the Pod of spec's incarnation: the supervisor, copied in by
// an init container, runs the command as the policy's user, inside a
// container that has only what a Docker sandbox has (a read-only root,
// the native set of capabilities, no privilege escalation, the runtime's
// default seccomp filter under the supervisor's own), no service account
// token, no host namespace, and limits from the policy.
func (d *Driver) podFor(spec driver.Spec, egressVars []string) *corev1.Pod {
	pol := spec.Policy.WithDefaultUser()
	pullPolicy := map[string]corev1.PullPolicy{"never": corev1.PullNever, "always": corev1.PullAlways}[d.opts.PullPolicy]
	if pullPolicy == "" {
		pullPolicy = corev1.PullIfNotPresent
	}
	root := int64(0)
	sec := &corev1.SecurityContext{
		RunAsUser:                &root, // the supervisor; the sandbox's processes are the policy's user
		RunAsNonRoot:             new(false),
		Privileged:               new(false),
		AllowPrivilegeEscalation: new(false),
		ReadOnlyRootFilesystem:   new(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: keptCapabilities()},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	tmp := resource.NewQuantity(pol.Limits.Tmp(), resource.BinarySI)
	main := corev1.Container{
		Name:    mainContainer,
		Image:   spec.Image,
		Command: append(supervisor.MainArgv(supervisorPath, readyFile, ""), spec.Command...),
		Env: []corev1.EnvVar{
			{Name: "HOME", Value: workdir},
			{Name: supervisor.PolicyEnv, Value: supervisor.PolicyJSON(pol)},
		},
		WorkingDir:               workdir,
		ImagePullPolicy:          pullPolicy,
		SecurityContext:          sec,
		TerminationMessagePath:   failedFile,
		TerminationMessagePolicy: corev1.TerminationMessageReadFile,
		Resources:                resources(pol.Limits),
		VolumeMounts: []corev1.VolumeMount{
			{Name: "corral-bin", MountPath: binDir, ReadOnly: true},
			{Name: "corral-run", MountPath: runDir},
			{Name: "sandbox", MountPath: workdir},
			{Name: "tmp", MountPath: "/tmp"},
		},
	}
	install := corev1.Container{
		Name:            "corral-supervisor",
		Image:           d.opts.SupervisorImage,
		Command:         supervisor.InstallArgv(imageSupervisor, supervisorPath),
		ImagePullPolicy: pullPolicy,
		SecurityContext: sec,
		VolumeMounts:    []corev1.VolumeMount{{Name: "corral-bin", MountPath: binDir}},
	}
	grace := int64(10)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: podPrefix(spec),
			Labels:       d.selectable(spec),
		},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			InitContainers:                []corev1.Container{install},
			Containers:                    []corev1.Container{main},
			Hostname:                      spec.Name,
			AutomountServiceAccountToken:  new(false),
			EnableServiceLinks:            new(false),
			TerminationGracePeriodSeconds: &grace,
			SecurityContext: &corev1.PodSecurityContext{
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Volumes: []corev1.Volume{
				{Name: "corral-bin", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: "corral-run", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: resource.NewQuantity(1<<20, resource.BinarySI)}}},
				{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: tmp}}},
				{Name: "sandbox", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: d.claimName(spec.ID)}}},
			},
		},
	}
	if pol.GVisor() {
		p.Spec.RuntimeClassName = &d.opts.GVisorRuntimeClass
	}
	if d.opts.Egress != nil {
		d.withEgress(p, spec, egressVars)
	}
	return p
}

// podPrefix begins the names of an incarnation's Pods (each run is a new
// Pod: a Pod that ended never runs again).
func podPrefix(spec driver.Spec) string {
	return "corral-" + spec.Name + "-" + spec.ID[:min(12, len(spec.ID))] + "-g" + strconv.FormatInt(spec.Generation, 10) + "-"
}

// keptCapabilities are the capabilities of a native sandbox, as
// Kubernetes names them (without "CAP_").
func keptCapabilities() []corev1.Capability {
	var caps []corev1.Capability
	for _, name := range supervisor.KeptCapabilityNames() {
		caps = append(caps, corev1.Capability(strings.TrimPrefix(name, "CAP_")))
	}
	return caps
}

// resources are the Pod's limits (and requests, the same) from the policy.
func resources(l policy.Limits) corev1.ResourceRequirements {
	list := corev1.ResourceList{}
	if l.MemoryBytes > 0 {
		list[corev1.ResourceMemory] = *resource.NewQuantity(l.MemoryBytes, resource.BinarySI)
	}
	if l.CPUMillis > 0 {
		list[corev1.ResourceCPU] = *resource.NewMilliQuantity(l.CPUMillis, resource.DecimalSI)
	}
	if len(list) == 0 {
		return corev1.ResourceRequirements{}
	}
	return corev1.ResourceRequirements{Limits: list, Requests: list}
}

// networkPolicyFor denies all ingress and egress of a sandbox's Pods but
// the egress to the gateway's shared proxy, when it has one: a sandbox
// reaches nothing else, and nothing of the cluster reaches it (the
// gateway's execs, logs and ports go through the API server and kubelet,
// not the Pod network).
func (d *Driver) networkPolicyFor(spec driver.Spec) *networkingv1.NetworkPolicy {
	sel := map[string]string{d.cfg.Label: "true", driver.LabelSandboxID: spec.ID}
	l := d.selectable(spec)
	delete(l, driver.LabelGeneration)
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: d.claimName(spec.ID), Labels: l},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: sel},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			Egress:      d.egressRules(),
		},
	}
}
