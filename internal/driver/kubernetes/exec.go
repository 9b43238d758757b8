package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"time"

	"github.com/distribution/reference"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"

	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/policy"
	"github.com/corral-sandbox/corral/internal/supervisor"
)

var (
	_ driver.Execer    = (*Driver)(nil)
	_ driver.LogReader = (*Driver)(nil)
)

// running returns the running Pod of a sandbox.
func (d *Driver) running(ctx context.Context, id string) (*corev1.Pod, error) {
	pods, err := d.pods(ctx, id)
	if err != nil {
		return nil, err
	}
	for i := range pods {
		if st := mainStatus(&pods[i]); st != nil && st.State.Running != nil && pods[i].DeletionTimestamp == nil {
			return &pods[i], nil
		}
	}
	return nil, errdefs.FailedPrecondition("sandbox %s has no running pod", id)
}

// Exec implements driver.Execer through the API server's pods/exec (over
// WebSocket, or SPDY from an older API server), running the command
// through the supervisor's exec stage, so what protects the main process
// protects it too.
func (d *Driver) Exec(ctx context.Context, id string, opts driver.ExecOptions) (int, error) {
	p, err := d.running(ctx, id)
	if err != nil {
		return 0, err
	}
	req := d.api.CoreV1().RESTClient().Post().Resource("pods").Namespace(d.opts.Namespace).Name(p.Name).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{
			Container: mainContainer,
			Command:   supervisor.ExecArgv(supervisorPath, supervisor.ExecStage{}, opts.Command),
			Stdin:     opts.Stdin != nil,
			Stdout:    true,
			Stderr:    !opts.TTY,
			TTY:       opts.TTY,
		}, scheme.ParameterCodec)
	exec, err := d.executor(req.URL())
	if err != nil {
		return 0, err
	}
	stream := remotecommand.StreamOptions{Stdin: opts.Stdin, Stdout: opts.Stdout, Tty: opts.TTY}
	if !opts.TTY {
		stream.Stderr = opts.Stderr
	}
	if opts.TTY {
		stream.TerminalSizeQueue = newSizeQueue(ctx, opts.Size, opts.Resize)
	}
	err = exec.StreamWithContext(ctx, stream)
	var exit utilexec.CodeExitError
	switch {
	case err == nil:
		return 0, nil
	case errors.As(err, &exit):
		return exit.Code, nil
	case ctx.Err() != nil:
		return 0, ctx.Err()
	}
	return 0, d.wrap(err, "exec in pod "+p.Name)
}

// executor streams to pods/exec over WebSocket, falling back to SPDY.
func (d *Driver) executor(u *url.URL) (remotecommand.Executor, error) {
	rc := d.restConfig
	ws, err := remotecommand.NewWebSocketExecutor(rc, "GET", u.String())
	if err != nil {
		return nil, fmt.Errorf("kubernetes exec: %w", err)
	}
	spdy, err := remotecommand.NewSPDYExecutor(rc, "POST", u)
	if err != nil {
		return nil, fmt.Errorf("kubernetes exec: %w", err)
	}
	return remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
}

// sizeQueue hands a TTY's sizes to the executor: the first, then each
// resize, until ctx ends.
type sizeQueue struct {
	ctx   context.Context
	first *remotecommand.TerminalSize
	next  <-chan driver.TerminalSize
}

func newSizeQueue(ctx context.Context, size driver.TerminalSize, resize <-chan driver.TerminalSize) *sizeQueue {
	q := &sizeQueue{ctx: ctx, next: resize}
	if size.Rows > 0 && size.Cols > 0 {
		q.first = &remotecommand.TerminalSize{Height: uint16(size.Rows), Width: uint16(size.Cols)}
	}
	return q
}

func (q *sizeQueue) Next() *remotecommand.TerminalSize {
	if s := q.first; s != nil {
		q.first = nil
		return s
	}
	select {
	case s, ok := <-q.next:
		if !ok {
			return nil
		}
		return &remotecommand.TerminalSize{Height: uint16(s.Rows), Width: uint16(s.Cols)}
	case <-q.ctx.Done():
		return nil
	}
}

// Logs implements driver.LogReader through pods/log of the newest Pod
// (its output and errors in one stream, as the kubelet keeps them).
func (d *Driver) Logs(ctx context.Context, id string, opts driver.LogOptions, stdout, _ io.Writer) error {
	pods, err := d.pods(ctx, id)
	if err != nil {
		return err
	}
	if len(pods) == 0 {
		return errdefs.NotFound("no pod for sandbox %s", id)
	}
	lo := &corev1.PodLogOptions{Container: mainContainer, Follow: opts.Follow}
	if opts.Tail > 0 {
		lo.TailLines = new(int64(opts.Tail))
	}
	rc, err := d.api.CoreV1().Pods(d.opts.Namespace).GetLogs(pods[0].Name, lo).Stream(ctx)
	if err != nil {
		if apierrors.IsBadRequest(err) {
			return errdefs.FailedPrecondition("logs of pod %s: %v", pods[0].Name, err) // not started yet
		}
		return d.wrap(err, "logs of pod "+pods[0].Name)
	}
	defer rc.Close()
	_, err = io.Copy(stdout, rc)
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// Watch implements driver.Watcher with informers on the gateway's Pods
// and claims, resynced every half minute.
func (d *Driver) Watch(ctx context.Context, changed func(id string)) error {
	f := informers.NewSharedInformerFactoryWithOptions(d.api, 30*time.Second,
		informers.WithNamespace(d.opts.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = d.selector("") }))
	notify := func(obj any) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		if m, ok := obj.(metav1.Object); ok {
			if id := m.GetLabels()[driver.LabelSandboxID]; id != "" {
				changed(id)
			}
		}
	}
	h := cache.ResourceEventHandlerFuncs{AddFunc: notify, UpdateFunc: func(_, obj any) { notify(obj) }, DeleteFunc: notify}
	for _, inf := range []cache.SharedIndexInformer{f.Core().V1().Pods().Informer(), f.Core().V1().PersistentVolumeClaims().Informer()} {
		if _, err := inf.AddEventHandler(h); err != nil {
			return fmt.Errorf("kubernetes watch: %w", err)
		}
	}
	f.Start(ctx.Done())
	<-ctx.Done()
	f.Shutdown()
	return nil
}

// Validate implements driver.Validator.
func (d *Driver) Validate(spec driver.Spec) error {
	switch {
	case spec.Image == "":
		return errdefs.InvalidArgument("sandbox %s names no image and the gateway has no default_image", spec.Name)
	case len(spec.Command) == 0:
		return errdefs.InvalidArgument("sandbox %s gives no command: the kubernetes driver does not read images' own commands, give one after --", spec.Name)
	case spec.Policy.GVisor() && d.opts.GVisorRuntimeClass == "":
		return errdefs.InvalidArgument("isolation: %s needs the cluster's RuntimeClass of runsc: set [drivers.kubernetes] gvisor_runtime_class", policy.IsolationGVisor)
	}
	if _, err := reference.ParseAnyReference(spec.Image); err != nil {
		return errdefs.InvalidArgument("image %q is not a valid image reference: %v", spec.Image, err)
	}
	return nil
}

// Tiers implements driver.Tierer: namespaces (the cluster's default
// runtime) and gVisor where the configured
// RuntimeClass exists in the cluster.
func (d *Driver) Tiers(ctx context.Context) []driver.Tier {
	t := driver.Tier{Name: policy.IsolationGVisor}
	switch name := d.opts.GVisorRuntimeClass; {
	case name == "":
		t.Detail = "no gvisor_runtime_class is configured"
	default:
		rc, err := d.api.NodeV1().RuntimeClasses().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Detail = fmt.Sprintf("RuntimeClass %s: %v", name, d.wrap(err, "get runtime class"))
		} else {
			t.Available, t.Detail = true, "RuntimeClass "+name+" (handler "+rc.Handler+")"
		}
	}
	ns := driver.Tier{Name: policy.IsolationNamespaces, Available: true, Detail: "Pods in namespace " + d.opts.Namespace + " under the cluster's default runtime"}
	return []driver.Tier{ns, t}
}
