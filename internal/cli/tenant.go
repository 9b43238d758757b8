package cli

import (
	"context"
	"fmt"
	"io"
	"math"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
	corral "github.com/corral-sandbox/corral/client"
	"github.com/corral-sandbox/corral/internal/caller"
	"github.com/corral-sandbox/corral/internal/policy"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

func newTenantCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "tenant",
		Aliases: []string{"tenants"},
		Short:   "Keep tenants: who owns sandboxes, with quotas (admins)",
		Long: `Every sandbox, pool, secret and exposed port belongs to one tenant; names
are unique within a tenant. A client certificate or a token acts in one
tenant with one role: viewer, member or admin. Sandboxes from before tenants
are in "default", as are the local socket's.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newTenantSetCmd(g, true), newTenantGetCmd(g), newTenantListCmd(g), newTenantSetCmd(g, false), newTenantDeleteCmd(g))
	return cmd
}

// quotaFlags are a quota as flags give it.
type quotaFlags struct {
	sandboxes                     int
	memory, cpus, disk, snapshots string
	set                           []string // the quota fields the flags set
	quota                         corralv1.Quota
}

func (q *quotaFlags) add(cmd *cobra.Command) {
	cmd.Flags().IntVar(&q.sandboxes, "max-sandboxes", 0, "most sandboxes at once, pool members included (0: no bound)")
	cmd.Flags().StringVar(&q.memory, "max-memory", "", "most memory, the sum of limits.memory, such as 8Gi (0: no bound)")
	cmd.Flags().StringVar(&q.cpus, "max-cpus", "", "most CPUs, the sum of limits.cpus, such as 4 or 2.5 (0: no bound)")
	cmd.Flags().StringVar(&q.disk, "max-disk", "", "most disk, the sum of limits.disk, such as 100Gi (0: no bound)")
	cmd.Flags().StringVar(&q.snapshots, "max-snapshot-size", "", "most the tenant's snapshots may hold, such as 50Gi (0: no bound)")
}

// parse reads the flags cmd was given into quota and set.
func (q *quotaFlags) parse(cmd *cobra.Command) error {
	size := func(flag, s string) (int64, error) {
		if s == "0" {
			return 0, nil
		}
		n, err := policy.ParseSize(s)
		if err != nil {
			return 0, fmt.Errorf("--%s: %w", flag, err)
		}
		return n, nil
	}
	for _, f := range []struct {
		flag, field string
		read        func() error
	}{
		{"max-sandboxes", "max_sandboxes", func() error {
			if q.sandboxes < 0 {
				return fmt.Errorf("--max-sandboxes %d: want 0 (no bound) or more", q.sandboxes)
			}
			q.quota.MaxSandboxes = int32(q.sandboxes)
			return nil
		}},
		{"max-memory", "max_memory_bytes", func() (err error) { q.quota.MaxMemoryBytes, err = size("max-memory", q.memory); return err }},
		{"max-cpus", "max_cpu_millis", func() error {
			c, err := strconv.ParseFloat(q.cpus, 64)
			if err != nil || math.IsNaN(c) || c < 0 || c > 1e6 {
				return fmt.Errorf("--max-cpus %q: want a number of CPUs such as 4 or 2.5 (0: no bound)", q.cpus)
			}
			q.quota.MaxCpuMillis = int64(math.Round(c * 1000))
			return nil
		}},
		{"max-disk", "max_disk_bytes", func() (err error) { q.quota.MaxDiskBytes, err = size("max-disk", q.disk); return err }},
		{"max-snapshot-size", "max_snapshot_bytes", func() (err error) {
			q.quota.MaxSnapshotBytes, err = size("max-snapshot-size", q.snapshots)
			return err
		}},
	} {
		if !cmd.Flags().Changed(f.flag) {
			continue
		}
		if err := f.read(); err != nil {
			return err
		}
		q.set = append(q.set, f.field)
	}
	return nil
}

// tenantView is the JSON and YAML form of a tenant: the field names are a
// contract for scripts.
type tenantView struct {
	Name    string     `json:"name" yaml:"name"`
	Created string     `json:"created" yaml:"created"`
	Quota   quotaView  `json:"quota" yaml:"quota"`
	Usage   *quotaView `json:"usage,omitempty" yaml:"usage,omitempty"`
}

// quotaView is a quota, or a usage, in the units flags take.
type quotaView struct {
	Sandboxes   int32   `json:"sandboxes" yaml:"sandboxes"`
	MemoryBytes int64   `json:"memory_bytes" yaml:"memory_bytes"`
	CPUs        float64 `json:"cpus" yaml:"cpus"`
	DiskBytes   int64   `json:"disk_bytes" yaml:"disk_bytes"`
	// SnapshotBytes is what the tenant's snapshots may hold, or hold.
	SnapshotBytes int64 `json:"snapshot_bytes" yaml:"snapshot_bytes"`
}

func tenantViewOf(t *corralv1.Tenant) tenantView {
	q := t.GetQuota()
	v := tenantView{Name: t.Name, Created: stamp(t.CreatedAt), Quota: quotaView{Sandboxes: q.GetMaxSandboxes(),
		MemoryBytes: q.GetMaxMemoryBytes(), CPUs: float64(q.GetMaxCpuMillis()) / 1000, DiskBytes: q.GetMaxDiskBytes(),
		SnapshotBytes: q.GetMaxSnapshotBytes()}}
	if u := t.Usage; u != nil {
		v.Usage = &quotaView{Sandboxes: u.Sandboxes, MemoryBytes: u.MemoryBytes, CPUs: float64(u.CpuMillis) / 1000, DiskBytes: u.DiskBytes,
			SnapshotBytes: u.SnapshotBytes}
	}
	return v
}

// bound writes one bound of a quota: "-" when there is none.
func bound(n int64, format func(int64) string) string {
	if n == 0 {
		return "-"
	}
	return format(n)
}

func count(n int64) string { return strconv.FormatInt(n, 10) }

func printTenants(w io.Writer, list []*corralv1.Tenant) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tMAX SANDBOXES\tMAX MEMORY\tMAX CPUS\tMAX DISK\tAGE")
	for _, t := range list {
		q := t.GetQuota()
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", t.Name, bound(int64(q.GetMaxSandboxes()), count),
			bound(q.GetMaxMemoryBytes(), sandbox.FormatBytes), bound(q.GetMaxCpuMillis(), sandbox.FormatCPUs),
			bound(q.GetMaxDiskBytes(), sandbox.FormatBytes), age(t.CreatedAt))
	}
	return tw.Flush()
}

// printTenant is a tenant's use of each bound of its quota.
func printTenant(w io.Writer, t *corralv1.Tenant) error {
	q, u := t.GetQuota(), t.GetUsage()
	fmt.Fprintf(w, "tenant %s (created %s)\n", t.Name, stamp(t.CreatedAt))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RESOURCE\tUSED\tQUOTA")
	fmt.Fprintf(tw, "sandboxes\t%d\t%s\n", u.GetSandboxes(), bound(int64(q.GetMaxSandboxes()), count))
	fmt.Fprintf(tw, "memory\t%s\t%s\n", sandbox.FormatBytes(u.GetMemoryBytes()), bound(q.GetMaxMemoryBytes(), sandbox.FormatBytes))
	fmt.Fprintf(tw, "cpus\t%s\t%s\n", sandbox.FormatCPUs(u.GetCpuMillis()), bound(q.GetMaxCpuMillis(), sandbox.FormatCPUs))
	fmt.Fprintf(tw, "disk\t%s\t%s\n", sandbox.FormatBytes(u.GetDiskBytes()), bound(q.GetMaxDiskBytes(), sandbox.FormatBytes))
	fmt.Fprintf(tw, "snapshots\t%s\t%s\n", sandbox.FormatBytes(u.GetSnapshotBytes()), bound(q.GetMaxSnapshotBytes(), sandbox.FormatBytes))
	return tw.Flush()
}

// newTenantSetCmd is `tenant create` (create) or `tenant update`.
func newTenantSetCmd(g *globals, create bool) *cobra.Command {
	var q quotaFlags
	use, short := "update NAME [--max-sandboxes N] [--max-memory 8Gi] [--max-cpus 4] [--max-disk 100Gi]", "Change a tenant's quota: the bounds given replace the old (0 lifts one)"
	if create {
		use, short = "create NAME [--max-sandboxes N] [--max-memory 8Gi] [--max-cpus 4] [--max-disk 100Gi]", "Create a tenant, with a quota"
	}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := q.parse(cmd); err != nil {
				return err
			}
			if !create && len(q.set) == 0 {
				return fmt.Errorf("give a bound to change: --max-sandboxes, --max-memory, --max-cpus or --max-disk")
			}
			return g.call(func(c *corral.Client) error {
				var (
					t    *corralv1.Tenant
					err  error
					verb = "updated"
				)
				if create {
					t, err = c.Tenants.CreateTenant(cmd.Context(), &corralv1.CreateTenantRequest{Name: args[0], Quota: &q.quota})
					verb = "created"
				} else {
					t, err = c.Tenants.UpdateTenant(cmd.Context(), &corralv1.UpdateTenantRequest{Name: args[0], Quota: &q.quota, Fields: q.set})
				}
				if err == nil {
					fmt.Fprintf(g.stdout, "tenant %q %s\n", t.Name, verb)
				}
				return err
			})
		},
	}
	q.add(cmd)
	return cmd
}

func newTenantGetCmd(g *globals) *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "get [NAME]",
		Short: "Show a tenant's quota and what its sandboxes use of it (default: your own tenant)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := ""
			if len(args) == 1 {
				name = args[0]
			}
			return query(g, cmd, format, func(ctx context.Context, c *corral.Client) (any, func() error, error) {
				t, err := c.Tenants.GetTenant(ctx, &corralv1.GetTenantRequest{Name: name})
				if err != nil {
					return nil, nil, err
				}
				return tenantViewOf(t), func() error { return printTenant(g.stdout, t) }, nil
			})
		},
	}
	cmd.Flags().StringVarP(&format, "output", "o", "table", "output: table, json or yaml")
	return cmd
}

func newTenantListCmd(g *globals) *cobra.Command {
	return listCommand(g, "List the tenants with their quotas",
		func(ctx context.Context, c *corral.Client) ([]*corralv1.Tenant, error) {
			resp, err := c.Tenants.ListTenants(ctx, &corralv1.ListTenantsRequest{})
			return resp.GetTenants(), err
		}, tenantViewOf, printTenants)
}

func newTenantDeleteCmd(g *globals) *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "delete NAME [--force]",
		Short: "Delete a tenant with its pools, secrets and tokens; --force deletes its sandboxes too",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.call(func(c *corral.Client) error {
				t, err := c.Tenants.DeleteTenant(cmd.Context(), &corralv1.DeleteTenantRequest{Name: args[0], Force: force})
				if err == nil {
					fmt.Fprintf(g.stdout, "tenant %q deleted\n", t.Name)
				}
				return err
			})
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "delete the tenant's sandboxes as sandbox delete does")
	return cmd
}

func newTokenCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "token",
		Aliases: []string{"tokens"},
		Short:   "Make, list and revoke bearer tokens for programs (admins)",
		Long: `A bearer token acts in one tenant with one role, like a client certificate,
for programs that hold no certificate: the SDKs, MCP over HTTP, scripts. It
is shown once, when made; the gateway keeps only its hash. Give it to the
command line with --token, $CORRAL_TOKEN or a context (corral context add
--token).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newTokenCreateCmd(g), newTokenListCmd(g), newTokenRevokeCmd(g))
	return cmd
}

func newTokenCreateCmd(g *globals) *cobra.Command {
	var (
		tenant, role, name string
		ttl                time.Duration
	)
	cmd := &cobra.Command{
		Use:   "create --tenant T --role R --ttl 24h [--name N]",
		Short: "Make a token; it is printed once, alone on the last line",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if tenant == "" {
				return fmt.Errorf("give the token's tenant: --tenant")
			}
			if _, err := caller.ParseRole(role); err != nil {
				return fmt.Errorf("--role: %w", err)
			}
			if ttl < time.Second {
				return fmt.Errorf("--ttl %s: want 1s or more, such as 24h", ttl)
			}
			return g.call(func(c *corral.Client) error {
				resp, err := c.Tenants.CreateToken(cmd.Context(), &corralv1.CreateTokenRequest{Tenant: tenant, Role: role,
					TtlSeconds: int64(ttl.Round(time.Second) / time.Second), Name: name})
				if err != nil {
					return err
				}
				i := resp.Info
				fmt.Fprintf(g.stdout, "token %s (%s): %s of tenant %s, until %s; it is shown this once:\n%s\n",
					i.Name, i.Id, i.Role, i.Tenant, stamp(i.ExpiresAt), resp.Token)
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&tenant, "tenant", "", "the tenant the token acts in")
	cmd.Flags().StringVar(&role, "role", string(caller.Member), "its role: viewer, member or admin")
	cmd.Flags().DurationVar(&ttl, "ttl", 24*time.Hour, "how long it is valid")
	cmd.Flags().StringVar(&name, "name", "", "a name to list and revoke it by (default token-ID)")
	return cmd
}

// tokenView is the JSON and YAML form of a token.
type tokenView struct {
	ID      string `json:"id" yaml:"id"`
	Name    string `json:"name" yaml:"name"`
	Tenant  string `json:"tenant" yaml:"tenant"`
	Role    string `json:"role" yaml:"role"`
	Created string `json:"created" yaml:"created"`
	Expires string `json:"expires" yaml:"expires"`
	Revoked string `json:"revoked,omitempty" yaml:"revoked,omitempty"`
}

func tokenViewOf(t *corralv1.Token) tokenView {
	return tokenView{ID: t.Id, Name: t.Name, Tenant: t.Tenant, Role: t.Role, Created: stamp(t.CreatedAt),
		Expires: stamp(t.ExpiresAt), Revoked: stamp(t.RevokedAt)}
}

func printTokens(w io.Writer, list []*corralv1.Token) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tID\tTENANT\tROLE\tEXPIRES\tSTATE")
	for _, t := range list {
		state := "valid"
		switch {
		case t.RevokedAt != nil:
			state = "revoked " + stamp(t.RevokedAt)
		case !t.ExpiresAt.AsTime().After(time.Now()):
			state = "expired"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", t.Name, t.Id, t.Tenant, t.Role, stamp(t.ExpiresAt), state)
	}
	return tw.Flush()
}

func newTokenListCmd(g *globals) *cobra.Command {
	var tenant string
	cmd := listCommand(g, "List the tokens (never the tokens themselves)",
		func(ctx context.Context, c *corral.Client) ([]*corralv1.Token, error) {
			resp, err := c.Tenants.ListTokens(ctx, &corralv1.ListTokensRequest{Tenant: tenant})
			return resp.GetTokens(), err
		}, tokenViewOf, printTokens)
	cmd.Flags().StringVar(&tenant, "tenant", "", "only this tenant's")
	return cmd
}

func newTokenRevokeCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "revoke NAME|ID",
		Short: "Revoke a token: refused from the next request on",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.call(func(c *corral.Client) error {
				t, err := c.Tenants.RevokeToken(cmd.Context(), &corralv1.RevokeTokenRequest{Name: args[0]})
				if err == nil {
					fmt.Fprintf(g.stdout, "token %s (%s) revoked\n", t.Name, t.Id)
				}
				return err
			})
		},
	}
}
