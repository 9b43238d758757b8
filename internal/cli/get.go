package cli

import (
	"github.com/spf13/cobra"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
)

func newGetCmd(g *globals) *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "get NAME",
		Short: "Show one sandbox",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkFormat(format); err != nil {
				return err
			}
			c, err := g.dial()
			if err != nil {
				return err
			}
			defer c.Close()
			sb, err := c.GetSandbox(cmd.Context(), &corralv1.GetSandboxRequest{Name: args[0]})
			if err != nil {
				return c.explain(err)
			}
			if ok, err := printStructured(g.stdout, format, viewOf(sb)); ok || err != nil {
				return err
			}
			return printSandboxes(g.stdout, []*corralv1.Sandbox{sb})
		},
	}
	cmd.Flags().StringVarP(&format, "output", "o", "table", "output: table, json or yaml")
	return cmd
}

func newListCmd(g *globals) *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List sandboxes",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkFormat(format); err != nil {
				return err
			}
			c, err := g.dial()
			if err != nil {
				return err
			}
			defer c.Close()
			resp, err := c.ListSandboxes(cmd.Context(), &corralv1.ListSandboxesRequest{})
			if err != nil {
				return c.explain(err)
			}
			views := make([]sandboxView, 0, len(resp.Sandboxes))
			for _, sb := range resp.Sandboxes {
				views = append(views, viewOf(sb))
			}
			if ok, err := printStructured(g.stdout, format, views); ok || err != nil {
				return err
			}
			return printSandboxes(g.stdout, resp.Sandboxes)
		},
	}
	cmd.Flags().StringVarP(&format, "output", "o", "table", "output: table, json or yaml")
	return cmd
}

func newHistoryCmd(g *globals) *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "history NAME",
		Short: "Show the operation journal of a sandbox, oldest first",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkFormat(format); err != nil {
				return err
			}
			c, err := g.dial()
			if err != nil {
				return err
			}
			defer c.Close()
			resp, err := c.ListOperations(cmd.Context(), &corralv1.ListOperationsRequest{Name: args[0]})
			if err != nil {
				return c.explain(err)
			}
			views := make([]*operationView, 0, len(resp.Operations))
			for _, op := range resp.Operations {
				views = append(views, opViewOf(op))
			}
			if ok, err := printStructured(g.stdout, format, views); ok || err != nil {
				return err
			}
			return printOperations(g.stdout, resp.Operations)
		},
	}
	cmd.Flags().StringVarP(&format, "output", "o", "table", "output: table, json or yaml")
	return cmd
}
