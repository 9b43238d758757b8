package cli

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/corral-sandbox/corral/internal/gateway"
)

func newMigrateStoreCmd(g *globals) *cobra.Command {
	var from, to string
	cmd := &cobra.Command{
		Use:   "migrate-store --to postgres://USER@HOST:PORT/DATABASE [--from sqlite://PATH]",
		Short: "Carry the SQLite store into an empty PostgreSQL database, with the gateway stopped",
		Long: `Copy every row of the gateway's SQLite store (HOME/corral.db, or --from) into an
empty PostgreSQL database: records, journal entries (with their ids), tenants, tokens,
sealed secrets, ledgers, pools, exposed ports, snapshots' records and the store's identity,
which the gateway's compute objects carry. It runs in one transaction of PostgreSQL and
checks every table's count before it commits; the SQLite file is left as it was. No
gateway may run on the home (its lock is taken) or on the target. Then start the gateway
with --store (or store_url) naming the PostgreSQL database; the secrets key stays in the
home (HOME/secrets.key): the values are sealed with it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if to == "" {
				return fmt.Errorf("--to: name the PostgreSQL database (postgres://USER@HOST:PORT/DATABASE)")
			}
			counts, err := gateway.MigrateStore(cmd.Context(), g.homeDir(), from, to)
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TABLE\tROWS")
			for _, c := range counts {
				fmt.Fprintf(tw, "%s\t%d\n", c.Table, c.Rows)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&from, "from", "", "the SQLite store to carry (default: sqlite://HOME/corral.db)")
	cmd.Flags().StringVar(&to, "to", "", "the empty PostgreSQL database to carry it into")
	return cmd
}
