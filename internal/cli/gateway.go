package cli

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/corral-sandbox/corral/internal/config"
	"github.com/corral-sandbox/corral/internal/earlysignal"
	"github.com/corral-sandbox/corral/internal/gateway"
)

func newGatewayCmd(g *globals) *cobra.Command {
	var (
		configPath  string
		flags       = config.Default()
		driverFlags = gateway.DriverFlags()
		driverVals  = make([]string, len(driverFlags))
	)
	cmd := &cobra.Command{
		Use:   "gateway",
		Short: "Run the gateway daemon (in the foreground)",
		Long: `Run the gateway daemon in the foreground. It keeps its store, lock and
socket in the home directory. Settings come from --config (default
HOME/corral.toml when it exists); flags override the file.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// Signals first: from here on SIGTERM/SIGINT never meet the
			// default disposition, whatever the gateway is doing.
			sigs := earlysignal.Signals() // subscribed at package init
			if sigs != nil {              // nil: a test build's late-signal-handler
				defer signal.Stop(sigs)
			}

			home := g.homeDir()
			cfg, err := loadGatewayConfig(cmd, configPath, home, flags, driverFlags, driverVals)
			if err != nil {
				return err
			}
			log := newLogger(cfg.LogLevel)
			return gateway.Run(gateway.Options{Config: cfg, Home: home, Logger: log, Signals: sigs})
		},
	}
	f := cmd.Flags()
	f.StringVar(&configPath, "config", "", "TOML config file (default HOME/corral.toml when it exists)")
	f.StringVar(&flags.ComputeDriver, "driver", flags.ComputeDriver, "compute driver: auto (docker when an engine answers, else native; neither: refuse to start), docker, native, kubernetes (--kubeconfig, --namespace) or fake (simulated, for tests)")
	for i, df := range driverFlags {
		f.StringVar(&driverVals[i], df.Name, "", df.Usage)
	}
	f.StringVar(&flags.SandboxLabel, "sandbox-label", flags.SandboxLabel, "label key that marks this gateway's compute objects")
	f.StringVar(&flags.ImagePullPolicy, "image-pull-policy", flags.ImagePullPolicy, "never, if_not_present or always")
	f.StringVar(&flags.DefaultImage, "default-image", flags.DefaultImage, "image for sandboxes created without --image (default: busybox:latest on docker, the host's root on native)")
	f.DurationVar(&flags.ShutdownTimeout, "shutdown-timeout", flags.ShutdownTimeout, "how long shutdown waits for driver calls in flight")
	f.DurationVar(&flags.ProvisioningTimeout, "provisioning-timeout", flags.ProvisioningTimeout, "deadline for a sandbox to become ready")
	f.DurationVar(&flags.StopTimeout, "stop-timeout", flags.StopTimeout, "grace between SIGTERM and SIGKILL when stopping a sandbox")
	f.DurationVar(&flags.ResyncInterval, "resync-interval", flags.ResyncInterval, "how often every sandbox is compared with the driver")
	f.StringVar(&flags.StoreURL, "store", "", "where records and the journal are kept: sqlite://PATH or postgres://USER@HOST:PORT/DATABASE (default: SQLite at HOME/corral.db)")
	f.StringVar(&flags.Listen, "listen", "", "also serve the API on HOST:PORT over TCP with mutual TLS 1.3")
	f.DurationVar(&flags.Replicas.LeaseTTL, "lease-ttl", flags.Replicas.LeaseTTL, "replicas on one PostgreSQL store: how long a leader cut off from it keeps the lease, within which a standby takes over")
	f.StringVar(&flags.UIListen, "ui-listen", "", "serve the web console on a loopback HOST:PORT (log in with a token: corral token create)")
	f.StringVar(&flags.MetricsListen, "metrics-listen", "", "serve Prometheus metrics on HOST:PORT at /metrics")
	f.StringArrayVar(&flags.TLS.ServerNames, "tls-server-name", nil, "extra name or IP for the server certificate (repeatable)")
	f.DurationVar(&flags.OrphanGrace, "orphan-grace", flags.OrphanGrace, "how long a compute object without a record is kept before it is removed")
	f.StringVar(&flags.LogLevel, "log-level", flags.LogLevel, "debug, info, warn or error")
	cmd.AddCommand(newClientCertCmd(g), newRevokeCmd(g), newDoctorCmd(g), newMigrateStoreCmd(g), newReplicasCmd(g), newSupervisorImageCmd(g))
	return cmd
}

// loadGatewayConfig reads the config file, then applies the flags that were
// given on the command line (the drivers' too: driverVals holds the
// values of driverFlags).
func loadGatewayConfig(cmd *cobra.Command, path, home string, flags config.Config, driverFlags []gateway.DriverFlag, driverVals []string) (config.Config, error) {
	cfg := config.Default()
	if path == "" {
		if p := filepath.Join(home, "corral.toml"); fileExists(p) {
			path = p
		}
	}
	if path != "" {
		var err error
		if cfg, err = config.Load(path, gateway.UnknownDriverKeys); err != nil {
			return cfg, err
		}
	}
	set := func(name string, dst *string, v string) {
		if cmd.Flags().Changed(name) {
			*dst = v
		}
	}
	setDur := func(name string, dst *time.Duration, v time.Duration) {
		if cmd.Flags().Changed(name) {
			*dst = v
		}
	}
	set("driver", &cfg.ComputeDriver, flags.ComputeDriver)
	set("sandbox-label", &cfg.SandboxLabel, flags.SandboxLabel)
	set("image-pull-policy", &cfg.ImagePullPolicy, flags.ImagePullPolicy)
	set("default-image", &cfg.DefaultImage, flags.DefaultImage)
	set("log-level", &cfg.LogLevel, flags.LogLevel)
	setDur("shutdown-timeout", &cfg.ShutdownTimeout, flags.ShutdownTimeout)
	setDur("provisioning-timeout", &cfg.ProvisioningTimeout, flags.ProvisioningTimeout)
	setDur("stop-timeout", &cfg.StopTimeout, flags.StopTimeout)
	setDur("resync-interval", &cfg.ResyncInterval, flags.ResyncInterval)
	setDur("orphan-grace", &cfg.OrphanGrace, flags.OrphanGrace)
	setDur("lease-ttl", &cfg.Replicas.LeaseTTL, flags.Replicas.LeaseTTL)
	set("store", &cfg.StoreURL, flags.StoreURL)
	set("listen", &cfg.Listen, flags.Listen)
	set("metrics-listen", &cfg.MetricsListen, flags.MetricsListen)
	set("ui-listen", &cfg.UIListen, flags.UIListen)
	if cmd.Flags().Changed("tls-server-name") {
		cfg.TLS.ServerNames = flags.TLS.ServerNames
	}
	for i, df := range driverFlags {
		if cmd.Flags().Changed(df.Name) {
			cfg.Drivers.Set(df.Driver, df.Key, driverVals[i])
		}
	}
	err := cfg.Validate()
	if err == nil {
		err = gateway.CheckStoreURL(cfg.StoreURL)
	}
	if err == nil {
		err = gateway.CheckDriverSettings(cfg)
	}
	if err != nil {
		where := "settings"
		if path != "" {
			where = "config " + path
		}
		return cfg, fmt.Errorf("%s: %w", where, err)
	}
	return cfg, nil
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return !errors.Is(err, os.ErrNotExist)
}

func newLogger(level string) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level))
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l}))
}
