// Package config holds the gateway's settings, read from a TOML file and
// overridden by flags, and where the gateway's home directory is.
package config

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/corral-sandbox/corral/internal/policy"
)

// Config is every gateway setting. The TOML keys are the contract.
type Config struct {
	// ComputeDriver is auto, fake, or a real driver's name.
	ComputeDriver string `toml:"compute_driver"`
	// SandboxLabel is the label key that marks this gateway's compute
	// objects; gateways sharing one engine and label tell theirs apart by
	// their identities (driver.LabelGateway).
	SandboxLabel    string `toml:"sandbox_label"`
	ImagePullPolicy string `toml:"image_pull_policy"`
	// DefaultImage is the image of sandboxes created without one; empty
	// means the driver's own default (docker: busybox:latest; native: the
	// host's root file system, read-only).
	DefaultImage        string        `toml:"default_image"`
	ShutdownTimeout     time.Duration `toml:"shutdown_timeout"`
	ProvisioningTimeout time.Duration `toml:"provisioning_timeout"`
	StopTimeout         time.Duration `toml:"stop_timeout"`
	ResyncInterval      time.Duration `toml:"resync_interval"`
	// OrphanGrace is how long a compute object with this gateway's label
	// but no record is kept (and reported) before it is removed.
	OrphanGrace time.Duration `toml:"orphan_grace"`
	LogLevel    string        `toml:"log_level"`
	// SandboxLogMaxSize caps what is kept of each sandbox's output on
	// disk (a size such as 10Mi); older output is rotated away.
	SandboxLogMaxSize string `toml:"sandbox_log_max_size"`
	// StoreURL is where the records and the journal are kept: empty for
	// SQLite at HOME/corral.db, sqlite://PATH for a SQLite file elsewhere,
	// postgres://USER@HOST:PORT/DATABASE for PostgreSQL.
	StoreURL string `toml:"store_url"`
	// Listen, when set (HOST:PORT), also serves the API over TCP with
	// mutual TLS 1.3.
	Listen string `toml:"listen"`
	// UIListen, when set (a loopback HOST:PORT), serves the web console
	// over plain HTTP to this host's browsers, who log in with a token.
	UIListen string `toml:"ui_listen"`
	// MetricsListen, when set (HOST:PORT), serves Prometheus metrics at
	// /metrics over plain HTTP.
	MetricsListen string   `toml:"metrics_listen"`
	TLS           TLS      `toml:"tls"`
	Egress        Egress   `toml:"egress"`
	MCP           MCP      `toml:"mcp"`
	Replicas      Replicas `toml:"replicas"`
	Drivers       Drivers  `toml:"drivers"`
}

// Replicas is the [replicas] table: gateways that share one PostgreSQL
// store and one home, of which one holds the store's lease at a time.
type Replicas struct {
	// LeaseTTL is how long a leader cut off from the store keeps the lease
	// (PostgreSQL ends its silent session after it): a standby takes over
	// within it. The leader gives the lease up itself after half of it.
	LeaseTTL time.Duration `toml:"lease_ttl"`
}

// MCP is the [mcp] table: the gateway's MCP endpoint (/mcp on the TLS
// listener).
type MCP struct {
	// MaxSandboxes bounds the sandboxes one caller's MCP sessions hold.
	MaxSandboxes int `toml:"max_sandboxes"`
}

// Egress is the [egress] table: what one sandbox can make its egress proxy
// hold.
type Egress struct {
	// MaxConnections bounds a sandbox's open connections to its proxy.
	MaxConnections int `toml:"max_connections"`
	// HeaderTimeout bounds the reading of a request's header, IdleTimeout
	// how long a keep-alive connection waits for its next request.
	HeaderTimeout time.Duration `toml:"header_timeout"`
	IdleTimeout   time.Duration `toml:"idle_timeout"`
}

// TLS is the [tls] table. Without cert_file and key_file the gateway makes
// its own CA and server certificate in HOME/tls.
type TLS struct {
	// ServerNames go into the server certificate besides 127.0.0.1, ::1
	// and localhost.
	ServerNames []string `toml:"server_names"`
	CertFile    string   `toml:"cert_file"`
	KeyFile     string   `toml:"key_file"`
	// ClientCAFile is the CA that client certificates must chain to
	// (default: the gateway's own CA).
	ClientCAFile string `toml:"client_ca_file"`
}

// Drivers holds one table per driver, [drivers.NAME], as the file gives it:
// each driver's entry (internal/driver/registry) decodes its own, over its
// defaults, and refuses a key it does not have.
type Drivers map[string]map[string]any

// Set sets key of driver's table (a flag of the driver's).
func (d *Drivers) Set(driver, key string, value any) {
	if *d == nil {
		*d = Drivers{}
	}
	if (*d)[driver] == nil {
		(*d)[driver] = map[string]any{}
	}
	(*d)[driver][key] = value
}

// Default returns the built-in settings.
func Default() Config {
	return Config{
		ComputeDriver:       "auto",
		SandboxLabel:        "corral.managed",
		ImagePullPolicy:     "if_not_present",
		ShutdownTimeout:     10 * time.Second,
		ProvisioningTimeout: 5 * time.Minute,
		StopTimeout:         10 * time.Second,
		ResyncInterval:      30 * time.Second,
		OrphanGrace:         5 * time.Minute,
		LogLevel:            "info",
		SandboxLogMaxSize:   "10Mi",
		Egress:              Egress{MaxConnections: 256, HeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute},
		MCP:                 MCP{MaxSandboxes: 5},
		Replicas:            Replicas{LeaseTTL: 10 * time.Second},
	}
}

// Load reads a TOML file over the defaults. Unknown keys are an error that
// names them: the file's own, and those of its [drivers.NAME] tables that
// driverKeys says no driver takes (nil: none checked here).
func Load(path string, driverKeys func(Drivers) []string) (Config, error) {
	cfg := Default()
	md, err := toml.DecodeFile(path, &cfg)
	if err != nil {
		return cfg, fmt.Errorf("config %s: %w", path, err)
	}
	var keys []string
	for _, k := range md.Undecoded() {
		keys = append(keys, fmt.Sprintf("%q", k.String()))
	}
	if driverKeys != nil {
		for _, k := range driverKeys(cfg.Drivers) {
			keys = append(keys, fmt.Sprintf("%q", k))
		}
	}
	if len(keys) > 0 {
		return cfg, fmt.Errorf("config %s: unknown key %s", path, strings.Join(keys, ", "))
	}
	return cfg, nil
}

// Validate checks the values of the settings.
func (c *Config) Validate() error {
	var errs []error
	if !slices.Contains([]string{"never", "if_not_present", "always"}, c.ImagePullPolicy) {
		errs = append(errs, fmt.Errorf("image_pull_policy %q: want never, if_not_present or always", c.ImagePullPolicy))
	}
	if c.SandboxLabel == "" || strings.ContainsAny(c.SandboxLabel, "= \t") {
		errs = append(errs, fmt.Errorf("sandbox_label %q: want a label key without spaces or '='", c.SandboxLabel))
	}
	for name, d := range map[string]time.Duration{
		"shutdown_timeout": c.ShutdownTimeout, "provisioning_timeout": c.ProvisioningTimeout,
		"stop_timeout": c.StopTimeout, "resync_interval": c.ResyncInterval, "orphan_grace": c.OrphanGrace,
		"egress.header_timeout": c.Egress.HeaderTimeout, "egress.idle_timeout": c.Egress.IdleTimeout,
	} {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("%s %s: want a positive duration such as 10s", name, d))
		}
	}
	if c.Replicas.LeaseTTL < 3*time.Second {
		errs = append(errs, fmt.Errorf("replicas.lease_ttl %s: want 3s or more (the leader asks the store every second, and gives the lease up after half of it)", c.Replicas.LeaseTTL))
	}
	if c.Egress.MaxConnections < 1 {
		errs = append(errs, fmt.Errorf("egress.max_connections %d: want at least 1", c.Egress.MaxConnections))
	}
	if !slices.Contains([]string{"debug", "info", "warn", "error"}, c.LogLevel) {
		errs = append(errs, fmt.Errorf("log_level %q: want debug, info, warn or error", c.LogLevel))
	}
	if _, err := c.SandboxLogMaxBytes(); err != nil {
		errs = append(errs, err)
	}
	if err := checkLoopback(c.UIListen); err != nil {
		errs = append(errs, fmt.Errorf("ui_listen %q: %w", c.UIListen, err))
	}
	if (c.TLS.CertFile == "") != (c.TLS.KeyFile == "") {
		errs = append(errs, errors.New("tls: give both cert_file and key_file, or neither"))
	}
	return errors.Join(errs...)
}

// SandboxLogMaxBytes is sandbox_log_max_size in bytes.
func (c *Config) SandboxLogMaxBytes() (int64, error) {
	n, err := policy.ParseSize(c.SandboxLogMaxSize)
	if err != nil {
		return 0, fmt.Errorf("sandbox_log_max_size: %w", err)
	}
	return n, nil
}

// DefaultHome is where the gateway keeps its state when neither --home nor
// CORRAL_HOME says otherwise: /var/lib/corral for root, else
// $XDG_DATA_HOME/corral (~/.local/share/corral).
func DefaultHome() string {
	if h := os.Getenv("CORRAL_HOME"); h != "" {
		return h
	}
	if os.Geteuid() == 0 {
		return "/var/lib/corral"
	}
	if x := os.Getenv("XDG_DATA_HOME"); x != "" {
		return filepath.Join(x, "corral")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(os.TempDir(), "corral")
	}
	return filepath.Join(home, ".local", "share", "corral")
}

// checkLoopback refuses an address that is not "" or a loopback
// HOST:PORT: the console's plain HTTP is for this host's browsers.
func checkLoopback(addr string) error {
	if addr == "" {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return errors.New("want a loopback address such as 127.0.0.1:7080 (plain HTTP is for this host's browsers)")
	}
	return nil
}

// SocketPath is the gateway's Unix socket in a home directory.
func SocketPath(home string) string { return filepath.Join(home, "corral.sock") }
