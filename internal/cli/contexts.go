package cli

import (
	"fmt"
	"slices"
	"text/tabwriter"

	"github.com/spf13/cobra"

	corral "github.com/corral-sandbox/corral/client"
)

func newContextCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "context",
		Short: "Manage the gateways the CLI talks to (in ~/.config/corral/config)",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	var entry corral.Context
	add := &cobra.Command{
		Use:   "add NAME --gateway https://HOST:PORT --ca FILE (--cert FILE --key FILE | --token TOKEN)",
		Short: "Add (or replace) a context",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			e := entry
			if err := e.Check(); err != nil {
				return err
			}
			cfg, err := corral.LoadConfig()
			if err != nil {
				return err
			}
			cfg.Contexts[args[0]] = &e
			if cfg.CurrentContext == "" {
				cfg.CurrentContext = args[0]
			}
			if err := cfg.Save(); err != nil {
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
	add.Flags().StringVar(&entry.Token, "token", "", "a bearer token to call as (corral token create), instead of a client certificate")
	add.Flags().StringVar(&entry.Tenant, "tenant", "", "the tenant to act in, for an admin")
	use := &cobra.Command{
		Use:   "use NAME",
		Short: "Make a context the current one",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := corral.LoadConfig()
			if err != nil {
				return err
			}
			if cfg.Contexts[args[0]] == nil {
				return fmt.Errorf("context %q not found (see corral context list)", args[0])
			}
			cfg.CurrentContext = args[0]
			if err := cfg.Save(); err != nil {
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
			cfg, err := corral.LoadConfig()
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
			cfg, err := corral.LoadConfig()
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
			return cfg.Save()
		},
	}
	cmd.AddCommand(add, use, list, remove)
	return cmd
}
