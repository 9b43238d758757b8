package kubernetes

import (
	"context"
	"time"

	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/driver/registry"
)

// Settings are the [drivers.kubernetes] table of the gateway's config.
type Settings struct {
	// Kubeconfig is a kubeconfig file; "" is $KUBECONFIG, the in-cluster
	// config, then ~/.kube/config.
	Kubeconfig string `toml:"kubeconfig"`
	// Context is the kubeconfig's context ("": its current one).
	Context string `toml:"context"`
	// Namespace holds the gateway's Pods, claims and network policies.
	Namespace string `toml:"namespace"`
	// SupervisorImage is an image the cluster can pull holding this
	// build's /corral-supervise (`corral gateway supervisor-image`).
	SupervisorImage string `toml:"supervisor_image"`
	// GVisorRuntimeClass is the cluster's RuntimeClass of runsc.
	GVisorRuntimeClass string `toml:"gvisor_runtime_class"`
	// StorageClass is the StorageClass of the sandboxes' claims.
	StorageClass string `toml:"storage_class"`
}

// Entry is the Kubernetes driver's entry in a gateway's registry: auto
// never chooses it (a cluster is chosen, never found).
func Entry() registry.Entry {
	return registry.Entry{
		Name: "kubernetes", DefaultImage: "busybox:latest",
		Settings: func() any { return &Settings{Namespace: "default"} },
		Flags: []registry.Flag{
			{Name: "kubeconfig", Key: "kubeconfig", Usage: "kubeconfig file of the cluster (default $KUBECONFIG, the in-cluster config, ~/.kube/config)"},
			{Name: "namespace", Key: "namespace", Usage: "Kubernetes namespace of the sandboxes' Pods (default \"default\")"},
			{Name: "kube-supervisor-image", Key: "supervisor_image", Usage: "image holding this build's /corral-supervise (corral gateway supervisor-image writes one)"},
		},
		Open: func(ctx context.Context, env registry.Env) (driver.Driver, error) {
			s := env.Settings.(*Settings)
			d, err := New(env.DriverConfig("", ""), Options{
				Kubeconfig: s.Kubeconfig, Context: s.Context, Namespace: s.Namespace,
				SupervisorImage: s.SupervisorImage, GVisorRuntimeClass: s.GVisorRuntimeClass,
				StorageClass: s.StorageClass, PullPolicy: env.Config.ImagePullPolicy,
			})
			if err != nil {
				return nil, err
			}
			pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			defer cancel()
			if err := d.Ping(pctx); err != nil {
				// Not fatal: records stay visible with the reason, and the
				// gateway converges once the API server answers.
				env.Log.Error("the Kubernetes API server does not answer yet; sandboxes wait for it", "err", err)
			}
			return d, nil
		},
		NoEgress: func(registry.Env) string {
			return "the kubernetes driver's sandboxes reach nothing (a NetworkPolicy denies all their egress); the egress proxy is not served to a cluster yet"
		},
		NotAuto: "runs sandboxes on a Kubernetes cluster named with --kubeconfig",
	}
}
