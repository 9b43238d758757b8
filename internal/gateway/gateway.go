// Package gateway wires a gateway process: signals, home directory and its
// lock, store, driver (chosen from the registry of this build's drivers,
// drivers.go), lifecycle manager and the API (internal/service) on a Unix
// socket, and the graceful shutdown that drains every driver call in
// flight. It is the one package that imports concrete drivers and stores.
package gateway

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"

	"github.com/corral-sandbox/corral/internal/caller"
	"github.com/corral-sandbox/corral/internal/config"
	"github.com/corral-sandbox/corral/internal/console"
	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/driver/registry"
	"github.com/corral-sandbox/corral/internal/driverimages"
	"github.com/corral-sandbox/corral/internal/egress"
	"github.com/corral-sandbox/corral/internal/exposed"
	"github.com/corral-sandbox/corral/internal/ledger"
	"github.com/corral-sandbox/corral/internal/lifecycle"
	"github.com/corral-sandbox/corral/internal/metrics"
	"github.com/corral-sandbox/corral/internal/sandboxfiles"
	"github.com/corral-sandbox/corral/internal/secrets"
	"github.com/corral-sandbox/corral/internal/service"
	"github.com/corral-sandbox/corral/internal/snapshots"
	"github.com/corral-sandbox/corral/internal/store/stores"
	"github.com/corral-sandbox/corral/internal/tenants"
	"github.com/corral-sandbox/corral/internal/tlsauth"
)

// Options are what Run needs besides the settings.
type Options struct {
	Config config.Config
	Home   string
	Logger *slog.Logger
	// Signals delivers SIGTERM/SIGINT; the caller subscribes before
	// anything else, so no signal meets the default disposition. The first
	// starts a graceful shutdown, the second cuts its budget short.
	Signals <-chan os.Signal
}

// Run runs a gateway until a signal stops it. It returns nil after a
// graceful shutdown. Once the lifecycle exists, every way out (a signal,
// a failed recovery, a listener that cannot open) goes through one
// shutdown, which settles the journal.
func Run(opts Options) error {
	log, cfg := opts.Logger, opts.Config
	sig := watchSignals(opts.Signals, log, cfg.ShutdownTimeout)
	if err := prepareHome(opts.Home); err != nil {
		return err
	}
	instance := newInstanceID()
	log = log.With("instance", instance)
	// startCtx ends at the first signal: a start-up step that waits (for a
	// Docker engine to answer, say) gives up, and nothing more is started.
	startCtx, cancelStart := context.WithCancel(context.Background())
	defer cancelStart()
	go func() {
		select {
		case <-sig.stopping:
			cancelStart()
		case <-startCtx.Done():
		}
	}()
	// The store opens whatever the signals say: a stop during start-up
	// still settles what dead instances left pending, at the shutdown. A
	// replica in standby waits here, and a signal then ends it.
	st, err := openStore(startCtx, opts, instance, log)
	if errors.Is(err, errStandbyEnded) {
		log.Info("gateway stopped", "in", "standby")
		return nil
	}
	if err != nil {
		return err
	}
	defer st.Close()
	log.Info("store open", "store", stores.Describe(cfg.StoreURL, opts.Home), "epoch", st.epoch)
	keys, err := secrets.Load(filepath.Join(opts.Home, "secrets.key"))
	if err != nil {
		return err
	}
	files := raiseFileLimit()
	led := ledger.New(st, log)
	defer led.Close() // before the store's: what is queued is written
	secretsPart := secrets.New(st, keys)
	secretsPart.Ledger = led
	eg := &egress.Sandboxes{Dir: filepath.Join(opts.Home, "egress"), Deny: hostAddrs(), HostBundle: driver.SystemBundle, Logger: log,
		Limits: egress.Limits{MaxConns: cfg.Egress.MaxConnections, HeaderTimeout: cfg.Egress.HeaderTimeout, IdleTimeout: cfg.Egress.IdleTimeout},
		Budget: egress.NewBudget(egressBudget(files)), Lookup: egress.FromRecords(st.GetSandbox),
		Placeholder: keys.Placeholder, Secret: secretsPart.Value, OnUse: led.Used, OnDenied: led.Denied}
	identity, err := st.Identity(context.Background())
	if err != nil {
		return err
	}
	// The configured compute driver ("auto": docker when an engine answers,
	// else native when this host can run it, else an error that says what
	// to install or run).
	compute, err := computeDrivers.Open(startCtx, registry.Env{Config: cfg, Home: opts.Home, Gateway: identity, Epoch: st.epoch, Log: log, Egress: eg,
		Supervisor: func(dir string) (string, error) { return installSupervisor(dir, log) }})
	if err != nil {
		return err
	}
	drv := compute.Driver
	defer drv.Close()

	content, err := snapshots.OpenContent(filepath.Join(opts.Home, "snapshots"))
	if err != nil {
		return fmt.Errorf("snapshots: %w", err)
	}
	lcfg := lifecycle.Config{
		Store: st, Driver: drv, Instance: instance, Epoch: st.epoch, Gateway: identity, Logger: log,
		ProvisioningTimeout: cfg.ProvisioningTimeout, StopTimeout: cfg.StopTimeout,
		DefaultImage: compute.Image(cfg), OrphanGrace: cfg.OrphanGrace,
		Failures: reintroduced(), Seeds: content,
		SecretExists: func(ctx context.Context, tenant, name string) error {
			_, err := st.GetSecret(ctx, tenant, name)
			return err
		},
	}
	if lcfg.NoEgress = compute.WhyNoEgress(); lcfg.NoEgress == "" {
		lcfg.Egress, lcfg.Ledger = eg, led
	}
	ports := &exposed.Ports{Store: st, Log: log}
	lcfg.Exposed = ports
	mgr := lifecycle.New(lcfg)
	secretsPart.Binders = mgr.Binders
	ports.Core = mgr
	snaps := snapshots.New(mgr, st, drv, content, log)
	core := service.Core{Sandboxes: mgr, Files: sandboxfiles.New(mgr, drv), Images: driverimages.New(drv, cfg.ImagePullPolicy), Ports: ports,
		Pools: mgr.Pools(), Secrets: secretsPart, Tenants: tenants.New(st, mgr.Delete), Snapshots: snaps, Replicas: st}
	g := &gateway{opts: opts, cfg: cfg, log: log, mgr: mgr, ports: ports, snaps: snaps, core: core, startCtx: startCtx}
	log.Info("gateway starting", "home", opts.Home, "driver", drv.Name(), "gateway", identity, "pid", os.Getpid(), "open_files", files)
	cause := g.run(sig)
	return g.shutdown(sig.hurry, cause)
}

// signals are what the gateway's signals say: stopping closes at the
// first (a graceful shutdown), hurry at the second (its budget cut short);
// late closes once a late signal handler may be installed (see
// watchSignals).
type signals struct {
	stopping, hurry, late chan struct{}
}

// watchSignals follows the signals the caller subscribed to. With none
// (nil: a test build's late-signal-handler failure), it subscribes itself,
// but only once recovery is done (late).
func watchSignals(ch <-chan os.Signal, log *slog.Logger, budget time.Duration) signals {
	s := signals{stopping: make(chan struct{}), hurry: make(chan struct{}), late: make(chan struct{})}
	if ch == nil {
		own := make(chan os.Signal, 2)
		ch = own
		go func() {
			<-s.late
			signal.Notify(own, syscall.SIGTERM, syscall.SIGINT)
		}()
	}
	go func() {
		sig := <-ch
		log.Info("signal received; shutting down", "signal", sig.String(), "budget", budget)
		close(s.stopping)
		sig = <-ch
		log.Warn("second signal; cutting the shutdown budget short", "signal", sig.String())
		close(s.hurry)
	}()
	return s
}

// gateway is a running gateway once its lifecycle exists.
type gateway struct {
	opts     Options
	cfg      config.Config
	log      *slog.Logger
	mgr      *lifecycle.Manager
	ports    *exposed.Ports
	snaps    *snapshots.Snapshots
	core     service.Core    // what the front ends serve
	startCtx context.Context // ends at the first signal
	servers  []server        // what serves the API and metrics, in the order opened
}

// run recovers, opens the listeners and keeps the sandboxes reconciled
// until the first signal (nil) or a failure (its error).
func (g *gateway) run(sig signals) error {
	if g.startCtx.Err() != nil {
		g.log.Info("stopped during start-up, before recovery")
		return nil
	}
	// Recovery runs while signals are watched: a signal during it cancels
	// it and leads to the same graceful shutdown as at any other time.
	recoverCtx, cancelRecover := context.WithCancel(context.Background())
	defer cancelRecover()
	recovered := make(chan error, 1)
	go func() { recovered <- g.mgr.Recover(recoverCtx) }()
	select {
	case err := <-recovered:
		if err != nil {
			return fmt.Errorf("recovery: %w", err)
		}
	case <-sig.stopping:
		cancelRecover()
		<-recovered
		return nil
	}
	close(sig.late)
	if err := g.snaps.Recover(g.startCtx); err != nil && g.startCtx.Err() == nil {
		// snapshots cut short stay invisible; the next start tries again
		g.log.Error("recovery of snapshots", "err", err)
	}
	if err := g.mgr.ReportForeign(g.startCtx); err != nil && g.startCtx.Err() == nil {
		g.log.Warn("could not look for other gateways' objects", "err", err)
	}
	g.mgr.WatchDriver()
	if err := g.ports.Serve(g.startCtx); err != nil {
		return fmt.Errorf("exposed ports: %w", err)
	}
	if err := g.listen(); err != nil {
		return err
	}
	g.log.Info("gateway ready", "socket", config.SocketPath(g.opts.Home))

	resync := time.NewTicker(g.cfg.ResyncInterval)
	defer resync.Stop()
	for {
		select {
		case <-sig.stopping:
			return nil
		case <-resync.C:
			// startCtx ends at the first signal, so that this never holds
			// up a shutdown
			if err := g.mgr.Resync(g.startCtx); err != nil && g.startCtx.Err() == nil {
				g.log.Error("resync", "err", err)
			}
			if err := g.mgr.CollectOrphans(g.startCtx); err != nil && g.startCtx.Err() == nil {
				g.log.Error("collect orphans", "err", err)
			}
			if err := g.ports.Serve(g.startCtx); err != nil && g.startCtx.Err() == nil {
				g.log.Error("exposed ports", "err", err)
			}
		}
	}
}

// listen opens every listener the settings ask for: the home's socket,
// the TLS address, the metrics address.
func (g *gateway) listen() error {
	srv, err := serve(g.opts.Home, g.core, g.log)
	if err != nil {
		return err
	}
	g.servers = append(g.servers, grpcServer{srv})
	var fe *frontEnds // the MCP endpoint's and the console's
	if g.cfg.Listen != "" || g.cfg.UIListen != "" {
		fe = newFrontEnds(g.core)
		g.servers = append(g.servers, grpcServer{fe.srv})
	}
	if g.cfg.Listen != "" {
		tcp, err := serveTLS(g.cfg, g.opts.Home, g.core, fe, g.log)
		if err != nil {
			return err
		}
		g.servers = append(g.servers, tcp...)
	}
	if g.cfg.UIListen != "" {
		web, err := serveConsole(g.cfg.UIListen, fe, g.core, g.log)
		if err != nil {
			return err
		}
		g.servers = append(g.servers, httpServer{web})
	}
	if g.cfg.MetricsListen != "" {
		msrv, err := serveMetrics(g.cfg.MetricsListen, g.log)
		if err != nil {
			return err
		}
		g.servers = append(g.servers, httpServer{msrv})
	}
	return nil
}

// cancelGrace is how long shutdown waits, once its budget is spent and the
// driver calls in flight are cancelled, for those calls to return.
const cancelGrace = 500 * time.Millisecond

// shutdown stops accepting requests, drains the driver calls in flight
// within the budget (cut short by hurry) and settles the journal. It
// returns cause, joined with the error of settling.
func (g *gateway) shutdown(hurry <-chan struct{}, cause error) error {
	start := time.Now()
	for _, srv := range g.servers {
		go srv.drain() // refuses new connections at once
	}
	ctx, cancel := context.WithTimeout(context.Background(), g.cfg.ShutdownTimeout)
	defer cancel()
	go func() {
		select {
		case <-hurry:
			cancel()
		case <-ctx.Done():
		}
	}()
	err := g.mgr.Shutdown(ctx, cancelGrace)
	for _, srv := range g.servers {
		srv.stop() // ends watch streams and anything the drain still waits for
	}
	g.log.Info("gateway stopped", "took", time.Since(start).Round(time.Millisecond))
	return errors.Join(cause, err)
}

// server is what a listener serves, as shutdown stops it: gRPC for the
// API, HTTP for metrics (and for the front ends to come).
type server interface {
	// drain refuses new connections and waits for those open to finish.
	drain()
	// stop closes whatever is still open.
	stop()
}

// ownSocket is the API's socket listener: closing it removes its file,
// unless another gateway's socket has replaced it since.
type ownSocket struct {
	net.Listener
	path string
	ino  uint64
}

func (l ownSocket) Close() error {
	err := l.Listener.Close()
	var st syscall.Stat_t
	if syscall.Stat(l.path, &st) == nil && st.Ino == l.ino {
		os.Remove(l.path)
	}
	return err
}

type grpcServer struct{ *grpc.Server }

func (s grpcServer) drain() { s.GracefulStop() }
func (s grpcServer) stop()  { s.Stop() }

type httpServer struct{ *http.Server }

func (s httpServer) drain() { _ = s.Shutdown(context.Background()) }
func (s httpServer) stop()  { _ = s.Close() }

// serve listens on HOME/corral.sock (mode 0600) and serves the API.
func serve(home string, core service.Core, log *slog.Logger) (*grpc.Server, error) {
	path := config.SocketPath(home)
	// The socket is made under a name of this process's, made 0600, then
	// renamed over path: it is never reachable with another mode, and a
	// socket file left at path (stale: the home lock is held) is replaced
	// whole, whoever else starts at once.
	tmp := filepath.Join(filepath.Dir(path), fmt.Sprintf(".corral.sock.%d", os.Getpid()))
	if err := os.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("remove stale socket %s: %w", tmp, err)
	}
	lis, err := net.Listen("unix", tmp)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	lis.(*net.UnixListener).SetUnlinkOnClose(false) // it is path's now: ownSocket removes it
	var st syscall.Stat_t
	err = os.Chmod(tmp, 0o600)
	if err == nil {
		err = syscall.Stat(tmp, &st)
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		lis.Close()
		os.Remove(tmp)
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	lis = ownSocket{Listener: lis, path: path, ino: st.Ino}
	srv := service.NewServer(core)
	background(log, "API server", func() error { return srv.Serve(lis) }, grpc.ErrServerStopped)
	return srv, nil
}

// background runs a server's serve loop and logs how it ended, unless
// that was the stop the gateway asked for.
func background(log *slog.Logger, what string, serve func() error, stopped error) {
	go func() {
		if err := serve(); err != nil && !errors.Is(err, stopped) {
			log.Error(what, "err", err)
		}
	}()
}

// serverTLS is the TLS listener's configuration: the server certificate
// (the settings', or one of the home's CA), client certificates of the CA.
func serverTLS(cfg config.Config, home string, log *slog.Logger) (*tls.Config, error) {
	ca, err := tlsauth.LoadOrCreateCA(filepath.Join(home, "tls"))
	if err != nil {
		return nil, fmt.Errorf("TLS: %w", err)
	}
	if older, err := ca.Without(caller.CertificateScheme); err != nil {
		log.Warn("TLS: read the issued client certificates", "err", err)
	} else if len(older) > 0 {
		log.Warn("client certificates issued before tenants act as admins of tenant default until reissued with --tenant and --role, or revoked",
			"certificates", strings.Join(older, ", "))
	}
	var tlsCfg *tls.Config
	if cfg.TLS.CertFile != "" {
		clientCA := cfg.TLS.ClientCAFile
		if clientCA == "" {
			clientCA = filepath.Join(home, "tls", "ca.crt")
		}
		tlsCfg, err = ca.ServerConfigWith(cfg.TLS.CertFile, cfg.TLS.KeyFile, clientCA)
	} else {
		var certPath, keyPath string
		if certPath, keyPath, err = ca.EnsureServerCert(cfg.TLS.ServerNames); err == nil {
			tlsCfg, err = ca.ServerConfig(certPath, keyPath)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("TLS: %w", err)
	}
	return tlsCfg, nil
}

// serveTLS serves cfg.Listen with TLS 1.3, making the gateway's CA and
// server certificate on first use: the gRPC API to connections that
// negotiate HTTP/2, MCP at /mcp (and /metrics, to admins) to those that
// speak HTTP/1.1 (through fe, as the caller their certificate or token
// names). A client certificate, when given, is verified at the handshake;
// a request with neither a valid certificate nor a valid token is refused
// before anything else (Unauthenticated, 401).
func serveTLS(cfg config.Config, home string, core service.Core, fe *frontEnds, log *slog.Logger) ([]server, error) {
	tlsCfg, err := serverTLS(cfg, home, log)
	if err != nil {
		return nil, err
	}
	lis, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", cfg.Listen, err)
	}
	split := newTLSSplit(lis, tlsCfg, log)
	srv := service.NewServer(core, grpc.Creds(handshaken{}))
	background(log, "API server (TCP)", func() error { return srv.Serve(split.h2) }, grpc.ErrServerStopped)
	web := &http.Server{Handler: newMCPEndpoint(fe, service.Gate{Tenants: core.Tenants}, cfg.MCP.MaxSandboxes), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	background(log, "MCP server (TCP)", func() error {
		if err := web.Serve(split.http1); !errors.Is(err, net.ErrClosed) { // closed with the gRPC server's listener
			return err
		}
		return http.ErrServerClosed
	}, http.ErrServerClosed)
	log.Info("serving the API and MCP with mutual TLS", "address", lis.Addr().String(), "mcp", "https://"+lis.Addr().String()+mcpPath,
		"ca", filepath.Join(home, "tls", "ca.crt"))
	return []server{grpcServer{srv}, httpServer{web}}, nil
}

// serveConsole serves the web console on addr (loopback, plain HTTP), its
// calls through fe as each session's caller.
func serveConsole(addr string, fe *frontEnds, core service.Core, log *slog.Logger) (*http.Server, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("console: listen on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: console.New(fe, service.Gate{Tenants: core.Tenants}), ReadHeaderTimeout: 10 * time.Second}
	background(log, "console", func() error { return srv.Serve(lis) }, http.ErrServerClosed)
	log.Info("serving the web console", "address", "http://"+lis.Addr().String()+"/")
	return srv, nil
}

// serveMetrics serves Prometheus metrics at /metrics on addr, and Go's
// profiles at /debug/pprof/ (the address is opt-in, and meant for
// operators).
func serveMetrics(addr string, log *slog.Logger) (*http.Server, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: listen on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", metrics.Handler())
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	background(log, "metrics server", func() error { return srv.Serve(lis) }, http.ErrServerClosed)
	log.Info("serving metrics", "address", "http://"+lis.Addr().String()+"/metrics")
	return srv, nil
}

// prepareHome makes sure the home directory exists and is usable.
func prepareHome(home string) error {
	if home == "" {
		return errors.New("no home directory: give --home or set CORRAL_HOME")
	}
	if err := os.MkdirAll(home, 0o700); err != nil {
		return fmt.Errorf("home %s: %w", home, err)
	}
	fi, err := os.Stat(home)
	if err != nil {
		return fmt.Errorf("home %s: %w", home, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("home %s: not a directory", home)
	}
	probe, err := os.CreateTemp(home, ".probe-*")
	if err != nil {
		return fmt.Errorf("home %s is not writable: %w", home, err)
	}
	probe.Close()
	return os.Remove(probe.Name())
}

func newInstanceID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// hostAddrs are the addresses of this host's interfaces: an egress proxy
// refuses them unless a policy's allowed_ips lists them.
func hostAddrs() []netip.Addr {
	addrs, _ := net.InterfaceAddrs()
	var out []netip.Addr
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			out = append(out, p.Addr())
		}
	}
	return out
}
