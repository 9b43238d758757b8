package kubernetes

import (
	"context"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/errdefs"
)

// trustVolume holds a sandbox's egress certificates (a ConfigMap).
const trustVolume = "corral-egress"

// withEgress gives the Pod of spec's incarnation its way out: the
// gateway's shared egress proxy in its environment (vars, the names of
// egressEnv's variables), and its trust ConfigMap at driver.TrustDir and
// over the system bundle. The variables come from the sandbox's Secret
// (ensureEnvSecret): the proxy URL carries
// the incarnation's token, and credentials' placeholders are there too,
// so that reading the Pod (a right many of a cluster's users have) does
// not give the sandbox's way out.
func (d *Driver) withEgress(p *corev1.Pod, spec driver.Spec, vars []string) {
	main := &p.Spec.Containers[0]
	for _, k := range vars {
		main.Env = append(main.Env, corev1.EnvVar{Name: k, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: d.claimName(spec.ID)}, Key: k,
		}}})
	}
	main.VolumeMounts = append(main.VolumeMounts,
		corev1.VolumeMount{Name: trustVolume, MountPath: driver.TrustDir, ReadOnly: true},
		corev1.VolumeMount{Name: trustVolume, MountPath: driver.SystemBundle, SubPath: driver.BundleFile, ReadOnly: true})
	p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: trustVolume, VolumeSource: corev1.VolumeSource{
		ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: d.claimName(spec.ID)}},
	}})
}

// egressEnv is incarnation spec's environment for its egress, by name.
func (d *Driver) egressEnv(spec driver.Spec) (map[string]string, error) {
	list, err := d.opts.Egress.Env(driver.Ref{ID: spec.ID, Generation: spec.Generation}, spec.Policy.Credentials)
	if err != nil {
		return nil, err
	}
	env := map[string]string{}
	for _, kv := range list {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	return env, nil
}

// ensureEnvSecret creates sandbox spec's Secret of its egress variables
// env, or brings it to this incarnation's (each has a token of its own).
func (d *Driver) ensureEnvSecret(ctx context.Context, spec driver.Spec, env map[string]string) error {
	l := d.selectable(spec)
	delete(l, driver.LabelGeneration)
	want := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: d.claimName(spec.ID), Labels: l}, StringData: env}
	secrets := d.api.CoreV1().Secrets(d.opts.Namespace)
	_, err := secrets.Create(ctx, want, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		return d.wrap(err, "create the egress secret of sandbox "+spec.Name)
	}
	cur, err := secrets.Get(ctx, want.Name, metav1.GetOptions{})
	if err != nil {
		return d.wrap(err, "get the egress secret of sandbox "+spec.Name)
	}
	cur.Data, cur.StringData = nil, env
	_, err = secrets.Update(ctx, cur, metav1.UpdateOptions{})
	return d.wrap(err, "update the egress secret of sandbox "+spec.Name)
}

// trustFor is the ConfigMap of sandbox spec's egress certificates: its
// CA (driver.CAFile) and the bundle of the gateway host's CAs and it.
func (d *Driver) trustFor(spec driver.Spec) (*corev1.ConfigMap, error) {
	ca, bundle, err := d.opts.Egress.Trust(spec.ID)
	if err != nil {
		return nil, err
	}
	l := d.selectable(spec)
	delete(l, driver.LabelGeneration)
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: d.claimName(spec.ID), Labels: l},
		Data:       map[string]string{driver.CAFile: string(ca), driver.BundleFile: string(bundle)},
	}, nil
}

// ensureTrust creates or mends sandbox spec's trust ConfigMap.
func (d *Driver) ensureTrust(ctx context.Context, spec driver.Spec) error {
	want, err := d.trustFor(spec)
	if err != nil {
		return err
	}
	maps := d.api.CoreV1().ConfigMaps(d.opts.Namespace)
	_, err = maps.Create(ctx, want, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		return d.wrap(err, "create the egress certificates of sandbox "+spec.Name)
	}
	cur, err := maps.Get(ctx, want.Name, metav1.GetOptions{})
	if err != nil {
		return d.wrap(err, "get the egress certificates of sandbox "+spec.Name)
	}
	if cur.Data[driver.CAFile] == want.Data[driver.CAFile] && cur.Data[driver.BundleFile] == want.Data[driver.BundleFile] {
		return nil
	}
	cur.Data = want.Data
	_, err = maps.Update(ctx, cur, metav1.UpdateOptions{})
	return d.wrap(err, "mend the egress certificates of sandbox "+spec.Name)
}

// egressRules are a sandbox's NetworkPolicy egress: to the shared proxy's
// address and port alone, or nothing.
func (d *Driver) egressRules() []networkingv1.NetworkPolicyEgressRule {
	if d.opts.Egress == nil {
		return nil
	}
	addr := d.opts.Egress.Addr()
	bits := 32
	if addr.Addr().Is6() {
		bits = 128
	}
	tcp, port := corev1.ProtocolTCP, intstr.FromInt32(int32(addr.Port()))
	return []networkingv1.NetworkPolicyEgressRule{{
		To:    []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: netip.PrefixFrom(addr.Addr(), bits).String()}}},
		Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &port}},
	}}
}

// AttachEgress implements driver.EgressAttacher: a gateway started after
// incarnation ref lets its token in again.
func (d *Driver) AttachEgress(ctx context.Context, ref driver.Ref) error {
	pods, err := d.pods(ctx, ref.ID)
	if err != nil {
		return err
	}
	for _, p := range pods {
		if generation(p.Labels) == ref.Generation && active(&p) && p.DeletionTimestamp == nil {
			if d.opts.Egress == nil {
				return nil // nothing to serve
			}
			return d.opts.Egress.Admit(ctx, ref)
		}
	}
	return errdefs.NotFound("sandbox %s does not run generation %d", ref.ID, ref.Generation)
}
