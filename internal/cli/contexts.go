package cli

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"
)

// clientConfig is the CLI's file of gateway contexts, kubectl-like:
// $CORRAL_CONFIG, else $XDG_CONFIG_HOME/corral/config (~/.config/corral/config).
type clientConfig struct {
	CurrentContext string                   `yaml:"current-context,omitempty"`
	Contexts       map[string]*contextEntry `yaml:"contexts,omitempty"`
}

// contextEntry is how to reach one gateway.
type contextEntry struct {
	Gateway string `yaml:"gateway"` // https://HOST:PORT or unix:///path
	CA      string `yaml:"ca,omitempty"`
	Cert    string `yaml:"cert,omitempty"`
	Key     string `yaml:"key,omitempty"`
}

func clientConfigPath() string {
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

func loadClientConfig() (*clientConfig, error) {
	path := clientConfigPath()
	cfg := &clientConfig{Contexts: map[string]*contextEntry{}}
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
		cfg.Contexts = map[string]*contextEntry{}
	}
	return cfg, nil
}

func (c *clientConfig) save() error {
	path := clientConfigPath()
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

func newContextCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "context",
		Short: "Manage the gateways the CLI talks to (in ~/.config/corral/config)",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	var entry contextEntry
	add := &cobra.Command{
		Use:   "add NAME --gateway https://HOST:PORT --ca FILE --cert FILE --key FILE",
		Short: "Add (or replace) a context",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			e := entry
			u, err := url.Parse(e.Gateway)
			if err != nil || (u.Scheme != "https" && u.Scheme != "unix") || (u.Scheme == "https" && u.Port() == "") {
				return fmt.Errorf("--gateway %q: want https://HOST:PORT or unix:///path", e.Gateway)
			}
			if u.Scheme == "https" && (e.CA == "" || e.Cert == "" || e.Key == "") {
				return errors.New("an https gateway needs --ca, --cert and --key (see corral gateway client-cert)")
			}
			for _, p := range []*string{&e.CA, &e.Cert, &e.Key} {
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
			cfg, err := loadClientConfig()
			if err != nil {
				return err
			}
			cfg.Contexts[args[0]] = &e
			if cfg.CurrentContext == "" {
				cfg.CurrentContext = args[0]
			}
			if err := cfg.save(); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "context %q added (current: %q)\n", args[0], cfg.CurrentContext)
			return nil
		},
	}
	add.Flags().StringVar(&entry.Gateway, "gateway", "", "https://HOST:PORT of a gateway started with --listen")
	add.Flags().StringVar(&entry.CA, "ca", "", "the gateway's ca.crt")
	add.Flags().StringVar(&entry.Cert, "cert", "", "client certificate")
	add.Flags().StringVar(&entry.Key, "key", "", "client key")
	use := &cobra.Command{
		Use:   "use NAME",
		Short: "Make a context the current one",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := loadClientConfig()
			if err != nil {
				return err
			}
			if cfg.Contexts[args[0]] == nil {
				return fmt.Errorf("context %q not found (see corral context list)", args[0])
			}
			cfg.CurrentContext = args[0]
			if err := cfg.save(); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "switched to context %q\n", args[0])
			return nil
		},
	}
	list := &cobra.Command{
		Use:   "list",
		Short: "List contexts; * marks the current one",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadClientConfig()
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "CURRENT\tNAME\tGATEWAY")
			names := make([]string, 0, len(cfg.Contexts))
			for n := range cfg.Contexts {
				names = append(names, n)
			}
			slices.Sort(names)
			for _, n := range names {
				mark := ""
				if n == cfg.CurrentContext {
					mark = "*"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\n", mark, n, cfg.Contexts[n].Gateway)
			}
			return tw.Flush()
		},
	}
	remove := &cobra.Command{
		Use:   "remove NAME",
		Short: "Remove a context",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := loadClientConfig()
			if err != nil {
				return err
			}
			if cfg.Contexts[args[0]] == nil {
				return fmt.Errorf("context %q not found", args[0])
			}
			delete(cfg.Contexts, args[0])
			if cfg.CurrentContext == args[0] {
				cfg.CurrentContext = ""
			}
			return cfg.save()
		},
	}
	cmd.AddCommand(add, use, list, remove)
	return cmd
}
