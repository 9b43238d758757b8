package driver

import (
	"context"
	"net"
	"net/netip"
	"strings"

	"github.com/corral-sandbox/corral/internal/policy"
)

// ProxyAddr is where a sandbox reaches its egress proxy: on its own
// loopback, at a port below 1024, which a workload without
// CAP_NET_BIND_SERVICE cannot take.
const ProxyAddr = "127.0.0.1:999"

// TrustDir is where a sandbox finds the certificates of its egress:
// CAFile (its own egress CA, which signs what the proxy inspects) and
// BundleFile (the gateway host's CA certificates and that one).
const (
	TrustDir   = "/.corral/egress"
	CAFile     = "ca.pem"
	BundleFile = "ca-bundle.pem"
	// SystemBundle is the CA bundle most tools read; a driver puts
	// BundleFile over it when the sandbox's root has it.
	SystemBundle = "/etc/ssl/certs/ca-certificates.crt"
)

// EgressProxyEnv names the proxy's address in a sandbox's environment; its
// supervisor waits for the proxy to answer before the main process runs.
const EgressProxyEnv = "CORRAL_EGRESS_PROXY"

// EgressEnv is what a sandbox with egress has in its environment: the
// proxy for the tools that read *_PROXY, and the bundle for those that
// take a CA file from the environment.
func EgressEnv() []string { return EgressEnvAt(ProxyAddr, "http://"+ProxyAddr) }

// EgressEnvAt is EgressEnv with the proxy at addr (host:port), its URL
// proxy (with the user information that tells the incarnation).
func EgressEnvAt(addr, proxy string) []string {
	bundle := TrustDir + "/" + BundleFile
	return []string{
		EgressProxyEnv + "=" + addr,
		"HTTP_PROXY=" + proxy, "HTTPS_PROXY=" + proxy, "http_proxy=" + proxy, "https_proxy=" + proxy,
		"NO_PROXY=localhost,127.0.0.1,::1", "no_proxy=localhost,127.0.0.1,::1",
		"SSL_CERT_FILE=" + bundle, "REQUESTS_CA_BUNDLE=" + bundle, "CURL_CA_BUNDLE=" + bundle,
		"GIT_SSL_CAINFO=" + bundle, "PIP_CERT=" + bundle, "NODE_EXTRA_CA_CERTS=" + TrustDir + "/" + CAFile,
	}
}

// WithEnv is env with each of set's KEY=VALUE in place of any of the same
// key (a program reading its environment may take the first it finds).
func WithEnv(env, set []string) []string {
	keys := map[string]bool{}
	for _, kv := range set {
		k, _, _ := strings.Cut(kv, "=")
		keys[k] = true
	}
	out := make([]string, 0, len(env)+len(set))
	for _, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); !keys[k] {
			out = append(out, kv)
		}
	}
	return append(out, set...)
}

// Egress is the gateway's egress proxy as a driver sees it. Every sandbox
// of a driver given one has it: its network namespace keeps loopback only,
// and the proxy, served inside it at ProxyAddr, is its one way out.
type Egress interface {
	// Prepare readies the egress of sandbox id (its CA, made once) and
	// returns the host directory that the driver mounts read-only at
	// TrustDir.
	Prepare(id string) (string, error)
	// Env is the environment incarnation ref has for its egress (EgressEnv,
	// and a placeholder for each of creds, its policy's credentials), over
	// the image's own.
	Env(ref Ref, creds []policy.Credential) ([]string, error)
	// Attach serves the proxy of incarnation ref inside the network
	// namespace at netns (/proc/PID/ns/net). A driver calls it in Start
	// once that namespace exists, before waiting for the main process.
	Attach(ctx context.Context, ref Ref, netns string) error
}

// EgressSharer is an Egress that can also serve sandboxes away from the
// gateway's host.
type EgressSharer interface {
	// Share serves the proxies of such sandboxes on ln, which they reach
	// at addr, until the SharedEgress is closed.
	Share(ln net.Listener, addr netip.AddrPort) (SharedEgress, error)
}

// SharedEgress is the gateway's egress proxy as a driver whose sandboxes
// run away from the gateway's host (a cluster's Pods) sees it: one
// listener that they reach over the network, each incarnation let in by
// a token of its own in its proxy URL, with its sandbox's rules and
// credentials. The driver's network confines each sandbox to Addr.
type SharedEgress interface {
	// Addr is where the sandboxes reach the proxy.
	Addr() netip.AddrPort
	// Trust returns sandbox id's egress CA certificate and bundle (CAFile
	// and BundleFile, which the driver puts at TrustDir), made once.
	Trust(id string) (ca, bundle []byte, err error)
	// Env is incarnation ref's environment for its egress: EgressEnvAt
	// Addr with its token, and a placeholder for each of creds.
	Env(ref Ref, creds []policy.Credential) ([]string, error)
	// Admit lets incarnation ref's token in from now on, and an earlier
	// incarnation's no longer. A driver calls it in Start before the
	// incarnation runs, and in AttachEgress.
	Admit(ctx context.Context, ref Ref) error
	// Close stops serving.
	Close() error
}

// EgressAttacher is a driver that serves the gateway's egress proxy to a
// running incarnation wherever its compute is, so that a gateway started
// after the incarnation serves its proxy again. (The native and Docker
// drivers serve it from the gateway's process, on a socket inside the
// incarnation's network namespace.)
type EgressAttacher interface {
	// AttachEgress serves incarnation ref's proxy again (Egress.Attach for
	// a driver on the gateway's host); errdefs.ErrNotFound when it does not
	// run.
	AttachEgress(ctx context.Context, ref Ref) error
}

// PortDialer is a driver that connects to a port of a running
// incarnation: to its own loopback, wherever its compute is. It is not
// egress: the sandbox's network policy does not apply to connections into
// it.
type PortDialer interface {
	// DialPort connects to 127.0.0.1:port inside incarnation ref;
	// errdefs.ErrNotFound when it does not run, an error wrapping
	// syscall.ECONNREFUSED when nothing listens there. The connection
	// half-closes (tunnel.Side's CloseWrite), as a TCP connection does:
	// the gateway's tunnels need that.
	DialPort(ctx context.Context, ref Ref, port int) (net.Conn, error)
}
