package kubernetes

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
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
	// EgressListen is where the gateway serves its egress proxy to the
	// cluster's Pods (host:port); "": sandboxes reach nothing.
	EgressListen string `toml:"egress_listen"`
	// EgressAddress is the IP:port the Pods reach that proxy at (a node
	// port or a load balancer before the gateway, say); "": EgressListen,
	// which must then name an IP.
	EgressAddress string `toml:"egress_address"`
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
			{Name: "kube-egress-listen", Key: "egress_listen", Usage: "host:port where the gateway serves its egress proxy to the cluster's Pods (default: none, sandboxes reach nothing)"},
			{Name: "kube-egress-address", Key: "egress_address", Usage: "IP:port the Pods reach that egress proxy at (default: --kube-egress-listen's)"},
		},
		Open: func(ctx context.Context, env registry.Env) (driver.Driver, error) {
			s := env.Settings.(*Settings)
			shared, err := shareEgress(s, env)
			if err != nil {
				return nil, err
			}
			d, err := New(env.DriverConfig("", ""), Options{
				Kubeconfig: s.Kubeconfig, Context: s.Context, Namespace: s.Namespace,
				SupervisorImage: s.SupervisorImage, GVisorRuntimeClass: s.GVisorRuntimeClass,
				StorageClass: s.StorageClass, PullPolicy: env.Config.ImagePullPolicy, Egress: shared,
			})
			if err != nil {
				if shared != nil {
					shared.Close()
				}
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
		NoEgress: func(env registry.Env) string {
			if env.Settings.(*Settings).EgressListen == "" {
				return "the kubernetes driver's sandboxes reach nothing (a NetworkPolicy denies all their egress): set [drivers.kubernetes] egress_listen (--kube-egress-listen) to serve them the egress proxy"
			}
			return ""
		},
		NotAuto: "runs sandboxes on a Kubernetes cluster named with --kubeconfig",
	}
}

// shareEgress serves the gateway's egress proxy to the cluster's Pods
// where the settings say, or returns nil when they say nowhere.
func shareEgress(s *Settings, env registry.Env) (driver.SharedEgress, error) {
	if s.EgressListen == "" {
		return nil, nil
	}
	sharer, ok := env.Egress.(driver.EgressSharer)
	if !ok {
		return nil, errors.New("kubernetes driver: this gateway's egress proxy cannot be shared with a cluster")
	}
	ln, err := net.Listen("tcp", s.EgressListen)
	if err != nil {
		return nil, fmt.Errorf("[drivers.kubernetes] egress_listen: %w", err)
	}
	addr, err := netip.ParseAddrPort(cmp.Or(s.EgressAddress, ln.Addr().String()))
	if err == nil && (addr.Addr().IsUnspecified() || addr.Port() == 0) {
		err = errors.New("no IP or no port")
	}
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("[drivers.kubernetes] egress_address %q: %v: give the IP:port the Pods reach the gateway's egress proxy at (their NetworkPolicy allows that alone) when egress_listen %q names no IP", s.EgressAddress, err, s.EgressListen)
	}
	shared, err := sharer.Share(ln, netip.AddrPortFrom(addr.Addr().Unmap(), addr.Port()))
	if err != nil {
		ln.Close()
		return nil, err
	}
	env.Log.Info("serving the egress proxy to the cluster's Pods", "listen", ln.Addr().String(), "pods_reach", addr.String())
	return shared, nil
}
