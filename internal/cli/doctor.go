package cli

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
)

func newDoctorCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "doctor",
		Short: "List what is inconsistent between records, journal and driver, and what is done about it",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.dial()
			if err != nil {
				return err
			}
			defer c.Close()
			report, err := c.Doctor(cmd.Context(), &corralv1.DoctorRequest{})
			if err != nil {
				return c.Explain(err)
			}
			tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			if len(report.Tiers) > 0 {
				fmt.Fprintln(tw, "ISOLATION\tAVAILABLE\tDETAIL")
				for _, t := range report.Tiers {
					fmt.Fprintf(tw, "%s\t%s\t%s\n", t.Name, yesNo(t.Available), oneLine(t.Detail))
				}
				fmt.Fprintln(tw)
			}
			if len(report.Replicas) > 1 || len(report.Replicas) == 1 && report.Replicas[0].Epoch > 0 {
				if err := printReplicas(tw, &corralv1.ListReplicasResponse{Replicas: report.Replicas}); err != nil {
					return err
				}
				fmt.Fprintln(tw)
			}
			if len(report.Findings) == 0 {
				fmt.Fprintln(tw, "no inconsistencies found")
				return tw.Flush()
			}
			fmt.Fprintln(tw, "SANDBOX\tPROBLEM\tACTION")
			for _, f := range report.Findings {
				fmt.Fprintf(tw, "%s\t%s\t%s\n", f.Sandbox, oneLine(f.Problem), f.Action)
			}
			return tw.Flush()
		},
	}
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
