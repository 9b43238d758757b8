package cli

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/corral-sandbox/corral/internal/caller"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/tlsauth"
)

func (g *globals) tlsDir() string { return filepath.Join(g.homeDir(), "tls") }

func newClientCertCmd(g *globals) *cobra.Command {
	var (
		out, tenant, role string
		validFor          time.Duration
	)
	cmd := &cobra.Command{
		Use:   "client-cert NAME [--tenant T] [--role R] [--out DIR]",
		Short: "Issue a client certificate from the gateway's CA, for a tenant and role (run where the gateway's home is)",
		Long: `Issue a client certificate from the gateway's CA. The certificate names
the tenant its holder acts in and its role (viewer, member or admin), inside
what the CA signs: a certificate claims no more than its issuer gave it.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := caller.ParseRole(role)
			if err != nil {
				return err
			}
			if err := sandbox.ValidateTenantName(tenant); err != nil {
				return err
			}
			ca, err := tlsauth.LoadOrCreateCA(g.tlsDir())
			if err != nil {
				return err
			}
			cert, err := ca.IssueClient(args[0], out, validFor, caller.CertificateURI(tenant, r))
			if err != nil {
				return err
			}
			fmt.Fprintf(g.stdout, "issued %s.crt and %s.key (%s of tenant %s, valid until %s) and ca.crt in %s\n",
				args[0], args[0], r, tenant, cert.NotAfter.UTC().Format(time.RFC3339), out)
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", ".", "directory to write NAME.crt, NAME.key and ca.crt to (mode 0600)")
	cmd.Flags().StringVar(&tenant, "tenant", caller.DefaultTenant, "the tenant the certificate acts in")
	cmd.Flags().StringVar(&role, "role", string(caller.Member), "its role: viewer, member or admin")
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
