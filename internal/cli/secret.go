package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
	corral "github.com/corral-sandbox/corral/client"
	"github.com/corral-sandbox/corral/internal/secrets"
)

func newSecretCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "secret",
		Aliases: []string{"secrets"},
		Short:   "Keep secrets the gateway never gives back (write-only, sealed at rest)",
		Long: `A secret's value goes in (create, update) and never comes out: get and list
show a fingerprint, never the value. A value is read from stdin (the
default), a file (--from-file) or an environment variable (--from-env),
never from the command line, which other users see in the process list.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newSecretSetCmd(g, true), newSecretSetCmd(g, false), newSecretGetCmd(g), newSecretListCmd(g), newSecretDeleteCmd(g),
		newSecretUsageCmd(g))
	return cmd
}

// secretView is the JSON and YAML form of a secret: the field names are a
// contract for scripts.
type secretView struct {
	Name        string   `json:"name" yaml:"name"`
	Fingerprint string   `json:"fingerprint" yaml:"fingerprint"`
	Created     string   `json:"created" yaml:"created"`
	Updated     string   `json:"updated" yaml:"updated"`
	BoundBy     []string `json:"bound_by,omitempty" yaml:"bound_by,omitempty"`
	LastUse     *useView `json:"last_use,omitempty" yaml:"last_use,omitempty"`
}

// useView is the JSON and YAML form of a ledger entry.
type useView struct {
	Time       string `json:"time" yaml:"time"`
	Verdict    string `json:"verdict" yaml:"verdict"`
	Sandbox    string `json:"sandbox" yaml:"sandbox"`
	Credential string `json:"credential" yaml:"credential"`
	Host       string `json:"host" yaml:"host"`
	Port       int32  `json:"port" yaml:"port"`
	Method     string `json:"method,omitempty" yaml:"method,omitempty"`
	Path       string `json:"path,omitempty" yaml:"path,omitempty"`
	Status     int32  `json:"status,omitempty" yaml:"status,omitempty"`
	Reason     string `json:"reason,omitempty" yaml:"reason,omitempty"`
}

func useViewOf(u *corralv1.CredentialUse) useView {
	return useView{Time: stamp(u.Time), Verdict: u.Verdict, Sandbox: u.Sandbox, Credential: u.Credential, Host: u.Host, Port: u.Port,
		Method: u.Method, Path: u.Path, Status: u.Status, Reason: u.Reason}
}

// useRow is a ledger entry's JSON form and table fields.
func useRow(u *corralv1.CredentialUse) (any, []string) {
	v := useViewOf(u)
	status := ""
	if v.Status != 0 {
		status = fmt.Sprint(v.Status)
	}
	return v, []string{v.Time, v.Verdict, v.Sandbox, v.Credential, v.Host, fmt.Sprint(v.Port), v.Method, v.Path, status, v.Reason}
}

func secretViewOf(s *corralv1.Secret) secretView {
	v := secretView{Name: s.Name, Fingerprint: s.Fingerprint, Created: stamp(s.CreatedAt), Updated: stamp(s.UpdatedAt), BoundBy: s.BoundBy}
	if s.LastUse != nil {
		u := useViewOf(s.LastUse)
		v.LastUse = &u
	}
	return v
}

func printSecrets(w io.Writer, list []*corralv1.Secret) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tFINGERPRINT\tCREATED\tUPDATED")
	for _, s := range list {
		v := secretViewOf(s)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", v.Name, v.Fingerprint, v.Created, v.Updated)
	}
	return tw.Flush()
}

// newSecretSetCmd is `secret create` (create) or `secret update`.
func newSecretSetCmd(g *globals, create bool) *cobra.Command {
	var fromFile, fromEnv string
	use, short := "update NAME [--from-file F | --from-env VAR | -]", "Replace a secret's value"
	if create {
		use, short = "create NAME [--from-file F | --from-env VAR | -]", "Create a secret; its value is read from stdin unless --from-file or --from-env"
	}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 2 && args[1] == "-" {
				return nil
			}
			if len(args) != 1 {
				return fmt.Errorf("usage: corral secret %s (the value is never an argument: the process list shows those)", use)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			value, err := readSecretValue(cmd.InOrStdin(), fromFile, fromEnv)
			if err != nil {
				return err
			}
			c, err := g.dial()
			if err != nil {
				return err
			}
			defer c.Close()
			var s *corralv1.Secret
			if create {
				s, err = c.Secrets.CreateSecret(cmd.Context(), &corralv1.CreateSecretRequest{Name: args[0], Value: value})
			} else {
				s, err = c.Secrets.UpdateSecret(cmd.Context(), &corralv1.UpdateSecretRequest{Name: args[0], Value: value})
			}
			if err != nil {
				return c.Explain(err)
			}
			_, err = fmt.Fprintf(g.stdout, "%s %s\n", s.Name, s.Fingerprint)
			return err
		},
	}
	cmd.Flags().StringVar(&fromFile, "from-file", "", "read the value from this file")
	cmd.Flags().StringVar(&fromEnv, "from-env", "", "read the value from this environment variable")
	return cmd
}

// readSecretValue reads a value from a file, an environment variable, or
// stdin; one line's final newline is dropped from stdin and a file, as
// echo and editors add it.
func readSecretValue(stdin io.Reader, file, env string) ([]byte, error) {
	var value []byte
	switch {
	case file != "" && env != "":
		return nil, errors.New("give --from-file or --from-env, not both")
	case env != "":
		v, ok := os.LookupEnv(env)
		if !ok {
			return nil, fmt.Errorf("--from-env %s: no such environment variable", env)
		}
		value = []byte(v)
	case file != "":
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("--from-file: %w", err)
		}
		value = trimNewline(data)
	default:
		data, err := io.ReadAll(io.LimitReader(stdin, secrets.MaxValueBytes+2))
		if err != nil {
			return nil, fmt.Errorf("reading the value from stdin: %w", err)
		}
		value = trimNewline(data)
	}
	if len(value) == 0 {
		return nil, errors.New("the value is empty: give it on stdin, with --from-file or with --from-env")
	}
	return value, nil
}

func trimNewline(b []byte) []byte {
	if n := len(b); n > 0 && b[n-1] == '\n' {
		b = b[:n-1]
		if n := len(b); n > 0 && b[n-1] == '\r' {
			b = b[:n-1]
		}
	}
	return b
}

func newSecretGetCmd(g *globals) *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "get NAME",
		Short: "Describe a secret: its fingerprint and dates, never its value",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return query(g, cmd, format, func(ctx context.Context, c *corral.Client) (any, func() error, error) {
				s, err := c.Secrets.GetSecret(ctx, &corralv1.GetSecretRequest{Name: args[0]})
				if err != nil {
					return nil, nil, err
				}
				return secretViewOf(s), func() error { return printSecret(g.stdout, s) }, nil
			})
		},
	}
	cmd.Flags().StringVarP(&format, "output", "o", "table", "output: table, json or yaml")
	return cmd
}

func newSecretListCmd(g *globals) *cobra.Command {
	return listCommand(g, "List the secrets, by name (never their values)",
		func(ctx context.Context, c *corral.Client) ([]*corralv1.Secret, error) {
			resp, err := c.Secrets.ListSecrets(ctx, &corralv1.ListSecretsRequest{})
			return resp.GetSecrets(), err
		}, secretViewOf, printSecrets)
}

// printSecret describes one secret: its table, then what binds it and
// its last use.
func printSecret(w io.Writer, s *corralv1.Secret) error {
	if err := printSecrets(w, []*corralv1.Secret{s}); err != nil {
		return err
	}
	bound := "none"
	if len(s.BoundBy) > 0 {
		bound = strings.Join(s.BoundBy, ", ")
	}
	fmt.Fprintf(w, "bound by: %s\n", printableText(bound))
	last := "never"
	if u := s.LastUse; u != nil {
		last = fmt.Sprintf("%s %s by %s (credentials.%s) to %s port %d", stamp(u.Time), u.Verdict, u.Sandbox, u.Credential, u.Host, u.Port)
		if u.Status != 0 {
			last += fmt.Sprintf(": %d", u.Status)
		}
		if u.Reason != "" {
			last += ": " + u.Reason
		}
	}
	_, err := fmt.Fprintf(w, "last use: %s\n", printableText(last))
	return err
}

func newSecretDeleteCmd(g *globals) *cobra.Command {
	var force bool
	cmd := deleteCommand(g, "Delete secrets (refused while a running sandbox binds one, unless --force)", func(ctx context.Context, c *corral.Client, name string) (string, error) {
		s, err := c.Secrets.DeleteSecret(ctx, &corralv1.DeleteSecretRequest{Name: name, Force: force})
		if err != nil {
			return "", err
		}
		if force && len(s.BoundBy) > 0 {
			return fmt.Sprintf("deleted secret %s (bindings cut: %s)", s.Name, strings.Join(s.BoundBy, ", ")), nil
		}
		return "deleted secret " + s.Name, nil
	})
	cmd.Flags().BoolVar(&force, "force", false, "delete it even while running sandboxes bind it: their requests that would carry it are refused from then on")
	return cmd
}

func newSecretUsageCmd(g *globals) *cobra.Command {
	var (
		follow bool
		format string
	)
	cmd := &cobra.Command{
		Use:   "usage NAME [-f]",
		Short: "List a secret's ledger: each injection by an egress proxy, each refusal of its placeholder",
		Long: `List, oldest first, each request an egress proxy put the secret's value in
(verdict injected, with the upstream's status) and each request it refused
because it carried the secret's placeholder where the value may not go
(verdict refused, with the reason): time, sandbox, credential, destination,
method and path. The ledger is kept in the store (it survives restarts),
the newest 10000 entries of each secret. With -f, keep printing new ones;
-o json prints one JSON object a line.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return streamTable(g, cmd, follow, format, "TIME\tVERDICT\tSANDBOX\tCREDENTIAL\tHOST\tPORT\tMETHOD\tPATH\tSTATUS\tREASON",
				func(ctx context.Context, c *corral.Client) (func() (*corralv1.CredentialUse, error), error) {
					stream, err := c.Secrets.SecretUsage(ctx, &corralv1.SecretUsageRequest{Name: args[0], Follow: follow})
					if err != nil {
						return nil, err
					}
					return stream.Recv, nil
				}, useRow)
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new entries")
	cmd.Flags().StringVarP(&format, "output", "o", "table", "output: table or json (a line each)")
	return cmd
}

// deleteCommand is a `delete NAME...` command: del deletes one and says
// what it did, in a line; the first failure ends it.
func deleteCommand(g *globals, short string, del func(ctx context.Context, c *corral.Client, name string) (string, error)) *cobra.Command {
	return &cobra.Command{
		Use:     "delete NAME...",
		Aliases: []string{"rm"},
		Short:   short,
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, names []string) error {
			c, err := g.dial()
			if err != nil {
				return err
			}
			defer c.Close()
			for _, name := range names {
				line, err := del(cmd.Context(), c, name)
				if err != nil {
					return c.Explain(err)
				}
				fmt.Fprintln(g.stdout, line)
			}
			return nil
		},
	}
}
