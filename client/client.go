// Package client is the Go SDK of corral: it reaches a gateway the way
// the corral command line does (the local gateway's socket, a context of
// the client configuration, or an https address with a client
// certificate) and offers what takes more than one call of the API:
// creating a sandbox and waiting until it runs, running a command and
// reading its output, copying files and trees, reaching a port inside a
// sandbox.
//
// Every call of the API is also there as it is generated (the embedded
// corralv1.SandboxServiceClient, and Files): a request this package has no
// helper for is one method call away.
//
// Errors are the gateway's: Message gives its one-line reason, and
// status.Code (google.golang.org/grpc/status) its class (NotFound,
// FailedPrecondition, ...). A gateway that cannot be reached is said in
// plain words, with the address tried.
package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
	"github.com/corral-sandbox/corral/internal/config"
	"github.com/corral-sandbox/corral/internal/tlsauth"
)

// Options say which gateway to reach. The zero value reaches the gateway
// the corral command line reaches with no flags: CORRAL_HOME's socket when
// that is set, else the current context of the client configuration, else
// the default home's socket.
type Options struct {
	// Gateway is the address: unix:///path/to/corral.sock, or
	// https://HOST:PORT with CA, Cert and Key.
	Gateway string
	// CA is the gateway's CA certificate, Cert and Key the client's
	// certificate and key (PEM files), for an https Gateway.
	CA, Cert, Key string
	// Context names a context of the client configuration (see Config).
	Context string
	// Home is a gateway's home directory on this machine: its socket.
	Home string
	// Token is a bearer token (corral token create) to call as: its
	// tenant and role. Empty takes $CORRAL_TOKEN, else the context's.
	Token string
	// Tenant names the tenant to act in, for an admin (others may name
	// only their own). Empty takes $CORRAL_TENANT, else the context's.
	Tenant string
}

// The environment variables a client reads when its Options leave the
// token or the tenant empty.
const (
	TokenEnv  = "CORRAL_TOKEN"
	TenantEnv = "CORRAL_TENANT"
)

// Target is how Options reach a gateway: Gateway, then Context, then Home
// (or CORRAL_HOME), then the current context, then the default home's
// socket.
func (o Options) Target() (Context, error) {
	c, err := o.target()
	if err != nil {
		return c, err
	}
	for _, v := range []struct {
		field      *string
		opt, envar string
	}{{&c.Token, o.Token, TokenEnv}, {&c.Tenant, o.Tenant, TenantEnv}} {
		if v.opt != "" {
			*v.field = v.opt
		} else if e := os.Getenv(v.envar); e != "" {
			*v.field = e
		}
	}
	return c, nil
}

func (o Options) target() (Context, error) {
	if o.Gateway != "" {
		c := Context{Gateway: o.Gateway, CA: o.CA, Cert: o.Cert, Key: o.Key}
		return c, c.check()
	}
	local := func(home string) Context {
		if home == "" {
			home = config.DefaultHome()
		}
		return Context{Gateway: "unix://" + config.SocketPath(home)}
	}
	if o.Context == "" && (o.Home != "" || os.Getenv("CORRAL_HOME") != "") {
		return local(o.Home), nil
	}
	cfg, err := LoadConfig()
	if err != nil {
		return Context{}, err
	}
	name := o.Context
	if name == "" {
		name = cfg.CurrentContext
	}
	if name == "" {
		return local(""), nil
	}
	c := cfg.Contexts[name]
	if c == nil {
		return Context{}, fmt.Errorf("context %q not found (see corral context list)", name)
	}
	return *c, nil
}

// Client is a connection to one gateway. It is safe for concurrent use.
type Client struct {
	corralv1.SandboxServiceClient
	// Files is the file API: reads, writes, copies, listings, watches.
	Files corralv1.FileServiceClient
	// Secrets is the secret API: write-only values, described by name.
	Secrets corralv1.SecretServiceClient
	// Tenants is the tenant API: tenants, quotas and bearer tokens.
	Tenants corralv1.TenantServiceClient
	// Snapshots is the snapshot API: snapshots, forks, export and import.
	Snapshots corralv1.SnapshotServiceClient

	conn *grpc.ClientConn
	addr string
	tls  *tls.Config // nil on a Unix socket
	host string      // HOST:PORT over https
}

// New connects to the gateway opts name. The connection is made at the
// first call, and made again after a failure: a gateway that restarts is
// reached again without a new Client.
func New(opts Options) (*Client, error) {
	target, err := opts.Target()
	if err != nil {
		return nil, err
	}
	return NewFor(target)
}

// NewFor connects to the gateway of a context (see New).
func NewFor(target Context) (*Client, error) {
	if err := target.check(); err != nil {
		return nil, err
	}
	var (
		tlsCfg     *tls.Config
		host       string
		creds      = insecure.NewCredentials()
		dialTarget = target.Gateway
	)
	if strings.HasPrefix(target.Gateway, "https://") {
		u, err := url.Parse(target.Gateway)
		if err != nil {
			return nil, fmt.Errorf("gateway %q: %w", target.Gateway, err)
		}
		if tlsCfg, err = tlsauth.ClientConfig(target.CA, target.Cert, target.Key); err != nil {
			return nil, err
		}
		tlsCfg.ServerName = u.Hostname()
		host, dialTarget = u.Host, u.Host
		creds = credentials.NewTLS(tlsCfg)
	}
	dial := []grpc.DialOption{grpc.WithTransportCredentials(creds)}
	if target.Token != "" || target.Tenant != "" {
		dial = append(dial, grpc.WithPerRPCCredentials(callAs{token: target.Token, tenant: target.Tenant, tls: tlsCfg != nil}))
	}
	conn, err := grpc.NewClient(dialTarget, append(dial,
		// windows and buffers for file copies, as the gateway's
		grpc.WithInitialWindowSize(streamWindow), grpc.WithInitialConnWindowSize(streamWindow),
		grpc.WithReadBufferSize(streamBuffer), grpc.WithWriteBufferSize(streamBuffer))...)
	if err != nil {
		return nil, fmt.Errorf("gateway %s: %w", target.Gateway, err)
	}
	c := NewFromConn(conn, target.Gateway)
	c.tls, c.host = tlsCfg, host
	return c, nil
}

// NewFromConn is a client on a gRPC connection made elsewhere (in the
// gateway's process, say); addr names the gateway in errors. Close closes
// conn.
func NewFromConn(conn *grpc.ClientConn, addr string) *Client {
	return &Client{SandboxServiceClient: corralv1.NewSandboxServiceClient(conn), Files: corralv1.NewFileServiceClient(conn),
		Secrets: corralv1.NewSecretServiceClient(conn), Tenants: corralv1.NewTenantServiceClient(conn),
		Snapshots: corralv1.NewSnapshotServiceClient(conn), conn: conn, addr: addr}
}

// TenantKey is the metadata key of the tenant a call acts in (an admin's
// choice; anyone else's own tenant only).
const TenantKey = "corral-tenant"

// callAs puts a bearer token and the tenant to act in on every call. A
// token goes only over TLS or the local socket: the client dials nothing
// else.
type callAs struct {
	token, tenant string
	tls           bool
}

func (c callAs) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	md := map[string]string{}
	if c.token != "" {
		md["authorization"] = "Bearer " + c.token
	}
	if c.tenant != "" {
		md[TenantKey] = c.tenant
	}
	return md, nil
}

func (c callAs) RequireTransportSecurity() bool { return c.tls }

// The HTTP/2 window of a stream (and of the connection) and the
// transport's buffers: gRPC's defaults cost a round trip per 64 KiB of a
// copy.
const (
	streamWindow = 4 << 20
	streamBuffer = 256 << 10
)

// Close ends the connection; calls in flight fail.
func (c *Client) Close() error { return c.conn.Close() }

// Address is the gateway's address as the client reaches it.
func (c *Client) Address() string { return c.addr }

// Explain turns a failure to reach the gateway into advice naming its
// address ("is `corral gateway` running?", or what is wrong with the TLS
// handshake); an error the gateway answered with is returned as it is,
// including an Unavailable of its own (a registry or an engine it could
// not reach), which the connection's state tells apart. Every method of
// this package returns its errors explained already.
func (c *Client) Explain(err error) error {
	if err == nil {
		return nil
	}
	var ex *explained
	if errors.As(err, &ex) {
		return err
	}
	if s, ok := status.FromError(err); ok && s.Code() == codes.Unavailable && !strings.Contains(s.Message(), "shutting down") &&
		c.conn.GetState() != connectivity.Ready {
		if c.tls != nil {
			if why := tlsauth.Diagnose(c.host, c.tls); why != nil {
				return &explained{fmt.Errorf("gateway %s: %v", c.addr, why), err}
			}
		}
		return &explained{fmt.Errorf("cannot reach the gateway at %s: is `corral gateway` running? (%s)", c.addr, s.Message()), err}
	}
	if errors.Is(err, context.DeadlineExceeded) && status.Code(err) != codes.DeadlineExceeded {
		return &explained{fmt.Errorf("the gateway at %s did not answer in time", c.addr), err}
	}
	return err
}

// explained is advice in place of a transport failure; the failure stays
// reachable (errors.Is, status.Code) through it.
type explained struct {
	advice, cause error
}

func (e *explained) Error() string { return e.advice.Error() }
func (e *explained) Unwrap() error { return e.cause }

// Message is what a person should read of an error: the gateway's own
// one-line reason, without gRPC's "rpc error: code = ..." wrapping.
func Message(err error) string {
	if err == nil {
		return ""
	}
	var ex *explained
	if errors.As(err, &ex) {
		return ex.advice.Error()
	}
	for e := err; e != nil; e = errors.Unwrap(e) {
		if s, ok := status.FromError(e); ok {
			return s.Message()
		}
	}
	return err.Error()
}
