// Package kubernetes is the compute driver for a Kubernetes cluster. Each
// sandbox has a PersistentVolumeClaim, its /sandbox, kept across
// incarnations and deleted with the sandbox, which also records the
// sandbox's current incarnation (its generation and Pod template) and how
// its last Pod ended; each run of an incarnation is one Pod, restartPolicy
// Never (the gateway's restart policy decides), labelled with the
// gateway's label, the sandbox id and the generation. An init container
// copies the supervisor from the supervisor image into the Pod, where it
// runs as the entrypoint, as on Docker. A NetworkPolicy per sandbox denies
// all its ingress and egress but to the gateway's egress proxy, which the
// gateway serves to the cluster on a listener of its own (see
// egress.Shared), with the same rules and credentials as on the other
// drivers.
package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"net/url"
	"slices"
	"strconv"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/errdefs"
)

// Options configure the Kubernetes driver.
type Options struct {
	// Kubeconfig is the path of a kubeconfig file; "" is $KUBECONFIG, then
	// the in-cluster config, then ~/.kube/config.
	Kubeconfig string
	// Context is the kubeconfig's context to use ("": its current one).
	Context string
	// Namespace holds every object of the gateway (default "default").
	Namespace string
	// SupervisorImage is an image whose /corral-supervise is this build's
	// supervisor (corral gateway supervisor-image writes one).
	SupervisorImage string
	// GVisorRuntimeClass is the cluster's RuntimeClass of runsc: sandboxes
	// with isolation: gvisor run under it; "" means the cluster has none.
	GVisorRuntimeClass string
	// StorageClass is the StorageClass of the sandboxes' claims ("": the
	// cluster's default).
	StorageClass string
	// PullPolicy is never, if_not_present or always.
	PullPolicy string
	// Egress, when set, is the gateway's egress proxy that the sandboxes
	// reach over the cluster's network (their NetworkPolicy lets them
	// reach it alone); nil: they reach nothing.
	Egress driver.SharedEgress
	// REST, when set, is used instead of a kubeconfig (tests).
	REST *rest.Config
}

// Paths inside every Pod.
const (
	binDir         = "/.corral/bin"
	supervisorPath = binDir + "/corral-supervise"
	runDir         = "/.corral/run"
	readyFile      = runDir + "/ready"
	failedFile     = runDir + "/failed"
	workdir        = "/sandbox"
	// mainContainer is the sandbox's container in its Pod.
	mainContainer = "sandbox"
	// imageSupervisor is where the supervisor image keeps the binary.
	imageSupervisor = "/corral-supervise"
)

// Annotations of a sandbox's claim, the record of its incarnation.
const (
	annGeneration = "corral.sandbox/generation"
	annPod        = "corral.sandbox/pod"    // the incarnation's Pod, as JSON
	annLabels     = "corral.sandbox/labels" // driver.Config.ObjectLabels, as JSON
	annStarted    = "corral.sandbox/started"
	annExit       = "corral.sandbox/exit" // the exit code of a Pod a stop deleted
	annExitNote   = "corral.sandbox/exit-note"
)

// Driver is the Kubernetes driver.
type Driver struct {
	cfg        driver.Config
	opts       Options
	api        kubernetes.Interface
	restConfig *rest.Config
	host       string

	mu      sync.Mutex
	stopped map[string]int // by Pod name: the exit code seen while a stop deleted it
}

var (
	_ driver.Driver    = (*Driver)(nil)
	_ driver.Watcher   = (*Driver)(nil)
	_ driver.Validator = (*Driver)(nil)
	_ driver.Leftovers = (*Driver)(nil)
	_ driver.Tierer    = (*Driver)(nil)
	// AttachEgress is for a gateway with a shared egress proxy; without
	// one it has nothing to attach.
	_ driver.EgressAttacher = (*Driver)(nil)
	_ driver.PortDialer     = (*Driver)(nil)
)

// New returns a Kubernetes driver. It does not need the API server to
// answer yet: calls fail with a clear error until it does.
func New(cfg driver.Config, opts Options) (*Driver, error) {
	if cfg.Label == "" {
		return nil, errors.New("kubernetes driver: no sandbox label configured")
	}
	if opts.SupervisorImage == "" {
		return nil, errors.New("kubernetes driver: no supervisor_image configured (an image holding /corral-supervise, which `corral gateway supervisor-image` writes)")
	}
	if opts.PullPolicy == "" {
		opts.PullPolicy = "if_not_present"
	}
	rc := opts.REST
	if rc == nil {
		var err error
		if rc, err = restConfig(opts.Kubeconfig, opts.Context); err != nil {
			return nil, err
		}
	}
	if opts.Namespace == "" {
		opts.Namespace = "default"
	}
	rc = rest.CopyConfig(rc)
	rc.UserAgent = "corral"
	api, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes driver: %w", err)
	}
	return &Driver{cfg: cfg, opts: opts, api: api, restConfig: rc, host: rc.Host, stopped: map[string]int{}}, nil
}

// restConfig loads the client config the way kubectl does: the file
// given, else $KUBECONFIG or the in-cluster config or ~/.kube/config.
func restConfig(path, context string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if path != "" {
		rules.ExplicitPath = path
	}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: context})
	rc, err := cc.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubernetes driver: no cluster to reach: %w", err)
	}
	return rc, nil
}

// Name implements driver.Driver.
func (d *Driver) Name() string { return "kubernetes" }

// Close implements driver.Driver; Pods keep running.
func (d *Driver) Close() error {
	if d.opts.Egress != nil {
		return d.opts.Egress.Close()
	}
	return nil
}

// Namespace is the namespace of the driver's objects.
func (d *Driver) Namespace() string { return d.opts.Namespace }

// Ping checks that the API server answers.
func (d *Driver) Ping(ctx context.Context) error {
	_, err := d.api.CoreV1().Namespaces().Get(ctx, d.opts.Namespace, metav1.GetOptions{})
	return d.wrap(err, "get namespace "+d.opts.Namespace)
}

// wrap names the API server in errors and maps its classes to ours.
func (d *Driver) wrap(err error, what string) error {
	var urlErr *url.Error
	var netErr net.Error
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return fmt.Errorf("kubernetes %s: %w", what, err)
	case apierrors.IsNotFound(err):
		return errdefs.NotFound("kubernetes %s: %w", what, err)
	case apierrors.IsAlreadyExists(err):
		return errdefs.AlreadyExists("kubernetes %s: %w", what, err)
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err):
		return errdefs.InvalidArgument("kubernetes %s: %w", what, err)
	case apierrors.IsForbidden(err):
		return errdefs.PermissionDenied("kubernetes %s: %w", what, err)
	case apierrors.IsConflict(err):
		return errdefs.FailedPrecondition("kubernetes %s: %w", what, err)
	case apierrors.IsServiceUnavailable(err), apierrors.IsTimeout(err), apierrors.IsServerTimeout(err), apierrors.IsTooManyRequests(err),
		errors.As(err, &urlErr), errors.As(err, &netErr):
		return errdefs.Unavailable("the Kubernetes API server at %s does not answer (%v): the sandbox waits for it", d.host, err)
	}
	return fmt.Errorf("kubernetes %s: %w", what, err)
}

// claimName is the claim of a sandbox; it names the gateway's label too,
// so gateways sharing a namespace never share a claim.
func (d *Driver) claimName(id string) string {
	h := fnv.New32a()
	h.Write([]byte(d.cfg.Label))
	return fmt.Sprintf("corral-%s-%08x", id, h.Sum32())
}

// selector selects this gateway's objects, of one sandbox when id is set.
func (d *Driver) selector(id string) string {
	set := labels.Set{d.cfg.Label: "true"}
	if id != "" {
		set[driver.LabelSandboxID] = id
	}
	return labels.SelectorFromSet(set).String()
}

// pods lists the Pods of this gateway, of one sandbox when id is set,
// newest generation (then newest Pod) first.
func (d *Driver) pods(ctx context.Context, id string) ([]corev1.Pod, error) {
	list, err := d.api.CoreV1().Pods(d.opts.Namespace).List(ctx, metav1.ListOptions{LabelSelector: d.selector(id)})
	if err != nil {
		return nil, d.wrap(err, "list pods")
	}
	pods := list.Items
	slices.SortFunc(pods, func(a, b corev1.Pod) int {
		if g := generation(b.Labels) - generation(a.Labels); g != 0 {
			return int(g)
		}
		return b.CreationTimestamp.Compare(a.CreationTimestamp.Time)
	})
	return pods, nil
}

// claims lists the claims of this gateway (of one sandbox when id is
// set) that are not being deleted.
func (d *Driver) claims(ctx context.Context, id string) ([]corev1.PersistentVolumeClaim, error) {
	list, err := d.api.CoreV1().PersistentVolumeClaims(d.opts.Namespace).List(ctx, metav1.ListOptions{LabelSelector: d.selector(id)})
	if err != nil {
		return nil, d.wrap(err, "list persistent volume claims")
	}
	return slices.DeleteFunc(list.Items, func(c corev1.PersistentVolumeClaim) bool { return c.DeletionTimestamp != nil }), nil
}

// claim returns the claim of a sandbox, or errdefs.ErrNotFound.
func (d *Driver) claim(ctx context.Context, id string) (*corev1.PersistentVolumeClaim, error) {
	c, err := d.api.CoreV1().PersistentVolumeClaims(d.opts.Namespace).Get(ctx, d.claimName(id), metav1.GetOptions{})
	if err == nil && c.DeletionTimestamp != nil {
		return nil, errdefs.NotFound("the claim of sandbox %s is being deleted", id)
	}
	if err != nil {
		return nil, d.wrap(err, "get the claim of sandbox "+id)
	}
	return c, nil
}

func generation(labels map[string]string) int64 {
	g, _ := strconv.ParseInt(labels[driver.LabelGeneration], 10, 64)
	return g
}

// Label is the key of the gateway's label on every object.
func (d *Driver) Label() string { return d.cfg.Label }
