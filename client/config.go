package client

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"gopkg.in/yaml.v3"
)

// Config is the client configuration the corral command line keeps, as
// kubectl keeps its kubeconfig: named contexts, one of them current. It
// lives at ConfigPath.
type Config struct {
	CurrentContext string              `yaml:"current-context,omitempty"`
	Contexts       map[string]*Context `yaml:"contexts,omitempty"`
}

// Context is how to reach one gateway.
type Context struct {
	// Gateway is https://HOST:PORT or unix:///path/to/corral.sock.
	Gateway string `yaml:"gateway"`
	// CA, Cert and Key are PEM files: the gateway's CA certificate, and
	// the client's certificate and key (an https Gateway needs all three).
	CA   string `yaml:"ca,omitempty"`
	Cert string `yaml:"cert,omitempty"`
	Key  string `yaml:"key,omitempty"`
	// Token is a bearer token to call as, instead of (or besides: the
	// token wins) a client certificate.
	Token string `yaml:"token,omitempty"`
	// Tenant is the tenant to act in, for an admin.
	Tenant string `yaml:"tenant,omitempty"`
}

// check says what is wrong with a context's address.
func (c Context) check() error {
	u, err := url.Parse(c.Gateway)
	switch {
	case err != nil || (u.Scheme != "https" && u.Scheme != "unix"):
		return fmt.Errorf("gateway %q: want https://HOST:PORT or unix:///path/to/corral.sock", c.Gateway)
	case u.Scheme == "unix" && u.Path == "":
		return fmt.Errorf("gateway %q: want unix:///path/to/corral.sock", c.Gateway)
	case u.Scheme == "https" && u.Port() == "":
		return fmt.Errorf("gateway %q: want https://HOST:PORT (the port the gateway's --listen gave)", c.Gateway)
	}
	return nil
}

// Check says what is wrong with a context before it is saved: its
// address, certificates missing for an https gateway, or a file it names
// that cannot be read. The paths it names become absolute.
func (c *Context) Check() error {
	if err := c.check(); err != nil {
		return err
	}
	if strings.HasPrefix(c.Gateway, "https://") {
		switch {
		case c.CA == "":
			return fmt.Errorf("gateway %s: an https gateway needs its CA certificate (--ca: the gateway home's tls/ca.crt)", c.Gateway)
		case (c.Cert == "") != (c.Key == ""):
			return fmt.Errorf("gateway %s: a client certificate needs its key, and a key its certificate (--cert and --key)", c.Gateway)
		case c.Cert == "" && c.Token == "":
			return fmt.Errorf("gateway %s: an https gateway needs a client certificate and its key (--cert and --key; see corral gateway client-cert) or a bearer token (--token; see corral token create)", c.Gateway)
		}
	}
	for _, p := range []*string{&c.CA, &c.Cert, &c.Key} {
		if *p == "" {
			continue
		}
		abs, err := filepath.Abs(*p)
		if err != nil {
			return err
		}
		if _, err := os.Stat(abs); err != nil {
			return err
		}
		*p = abs
	}
	return nil
}

// ConfigPath is where the client configuration lives: $CORRAL_CONFIG, else
// $XDG_CONFIG_HOME/corral/config (~/.config/corral/config).
func ConfigPath() string {
	if p := os.Getenv("CORRAL_CONFIG"); p != "" {
		return p
	}
	dir := os.Getenv("XDG_CONFIG_HOME")
	if dir == "" {
		home, _ := os.UserHomeDir()
		dir = filepath.Join(home, ".config")
	}
	return filepath.Join(dir, "corral", "config")
}

// LoadConfig reads the client configuration; a missing file is an empty
// one. An unknown key is an error that names it.
func LoadConfig() (*Config, error) {
	path := ConfigPath()
	cfg := &Config{Contexts: map[string]*Context{}}
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return cfg, nil
	}
	if err != nil {
		return nil, err
	}
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	dec.KnownFields(true)
	if err := dec.Decode(cfg); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if cfg.Contexts == nil {
		cfg.Contexts = map[string]*Context{}
	}
	return cfg, nil
}

// Save writes the client configuration whole (0600: it names keys).
func (c *Config) Save() error {
	path := ConfigPath()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	data, err := yaml.Marshal(c)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
