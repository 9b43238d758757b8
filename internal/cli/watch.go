package cli

import (
	"encoding/json"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
)

func newWatchCmd(g *globals) *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "watch [NAME]",
		Short: "Print sandboxes as they change, until interrupted",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if format != "table" && format != "json" {
				return fmt.Errorf("-o %q: want table or json", format)
			}
			c, err := g.dial()
			if err != nil {
				return err
			}
			defer c.Close()
			req := &corralv1.WatchSandboxesRequest{}
			if len(args) == 1 {
				req.Name = args[0]
			}
			stream, err := c.WatchSandboxes(cmd.Context(), req)
			if err != nil {
				return c.Explain(err)
			}
			tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			if format == "table" {
				fmt.Fprintln(tw, "TIME\tEVENT\tNAME\tPHASE\tDESIRED\tGEN\tREASON")
			}
			enc := json.NewEncoder(g.stdout)
			for {
				ev, err := stream.Recv()
				if err != nil {
					if cmd.Context().Err() != nil {
						return nil
					}
					return c.Explain(err)
				}
				if ev.Type == "SYNCED" {
					continue
				}
				sb := ev.Sandbox
				if format == "json" {
					if err := enc.Encode(map[string]any{"type": ev.Type, "sandbox": viewOf(sb)}); err != nil {
						return err
					}
					continue
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", time.Now().Format("15:04:05.000"), ev.Type, sb.Name,
					sb.Phase, sb.DesiredState, sb.Generation, oneLine(sb.Reason))
				tw.Flush()
			}
		},
	}
	cmd.Flags().StringVarP(&format, "output", "o", "table", "output: table or json (one object per line)")
	return cmd
}
