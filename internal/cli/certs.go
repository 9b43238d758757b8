package cli

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/corral-sandbox/corral/internal/tlsauth"
)

func (g *globals) tlsDir() string { return filepath.Join(g.homeDir(), "tls") }

func newClientCertCmd(g *globals) *cobra.Command {
	var (
		out      string
		validFor time.Duration
	)
	cmd := &cobra.Command{
		Use:   "client-cert NAME [--out DIR]",
		Short: "Issue a client certificate from the gateway's CA (run where the gateway's home is)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ca, err := tlsauth.LoadOrCreateCA(g.tlsDir())
			if err != nil {
				return err
			}
			cert, err := ca.IssueClient(args[0], out, validFor)
			if err != nil {
				return err
			}
			fmt.Fprintf(g.stdout, "issued %s.crt and %s.key (valid until %s) and ca.crt in %s\n",
				args[0], args[0], cert.NotAfter.UTC().Format(time.RFC3339), out)
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", ".", "directory to write NAME.crt, NAME.key and ca.crt to (mode 0600)")
	cmd.Flags().DurationVar(&validFor, "valid-for", tlsauth.ClientValidity, "how long the certificate is valid")
	return cmd
}

func newRevokeCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "revoke NAME",
		Short: "Revoke every client certificate issued to NAME, from the next handshake on",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ca, err := tlsauth.LoadOrCreateCA(g.tlsDir())
			if err != nil {
				return err
			}
			n, err := ca.Revoke(args[0])
			if err != nil {
				return err
			}
			fmt.Fprintf(g.stdout, "revoked %d certificate(s) of %s\n", n, args[0])
			return nil
		},
	}
}
