package cli

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
)

// query runs a read-only command: it checks -o, dials the gateway, fetches
// with fetch, and prints the result's view as JSON/YAML or its table.
func query(g *globals, cmd *cobra.Command, format string,
	fetch func(ctx context.Context, c *client) (view any, table func() error, err error)) error {
	if err := checkFormat(format); err != nil {
		return err
	}
	c, err := g.dial()
	if err != nil {
		return err
	}
	defer c.Close()
	view, table, err := fetch(cmd.Context(), c)
	if err != nil {
		return c.explain(err)
	}
	if ok, err := printStructured(g.stdout, format, view); ok || err != nil {
		return err
	}
	return table()
}

func newGetCmd(g *globals) *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "get NAME",
		Short: "Show one sandbox",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return query(g, cmd, format, func(ctx context.Context, c *client) (any, func() error, error) {
				sb, err := c.GetSandbox(ctx, &corralv1.GetSandboxRequest{Name: args[0]})
				if err != nil {
					return nil, nil, err
				}
				return viewOf(sb), func() error {
					if err := printSandboxes(g.stdout, []*corralv1.Sandbox{sb}); err != nil {
						return err
					}
					if sb.Protections != "" || sb.Network != "" {
						fmt.Fprintln(g.stdout)
					}
					if sb.Protections != "" {
						fmt.Fprintf(g.stdout, "protections: %s\n", sb.Protections)
					}
					if sb.Network != "" {
						fmt.Fprintf(g.stdout, "network: %s\n", sb.Network)
					}
					return nil
				}, nil
			})
		},
	}
	cmd.Flags().StringVarP(&format, "output", "o", "table", "output: table, json or yaml")
	return cmd
}

func newListCmd(g *globals) *cobra.Command {
	return listCommand(g, "List sandboxes",
		func(ctx context.Context, c *client) ([]*corralv1.Sandbox, error) {
			resp, err := c.ListSandboxes(ctx, &corralv1.ListSandboxesRequest{})
			return resp.GetSandboxes(), err
		}, viewOf, printSandboxes)
}

// listCommand is a `list` command: list fetches the items, which print as
// a table, or as JSON or YAML of their views.
func listCommand[T, V any](g *globals, short string, list func(ctx context.Context, c *client) ([]T, error),
	view func(T) V, table func(io.Writer, []T) error) *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   short,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return query(g, cmd, format, func(ctx context.Context, c *client) (any, func() error, error) {
				items, err := list(ctx, c)
				if err != nil {
					return nil, nil, err
				}
				views := make([]V, 0, len(items))
				for _, it := range items {
					views = append(views, view(it))
				}
				return views, func() error { return table(g.stdout, items) }, nil
			})
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
			return query(g, cmd, format, func(ctx context.Context, c *client) (any, func() error, error) {
				resp, err := c.ListOperations(ctx, &corralv1.ListOperationsRequest{Name: args[0]})
				if err != nil {
					return nil, nil, err
				}
				views := make([]*operationView, 0, len(resp.Operations))
				for _, op := range resp.Operations {
					views = append(views, opViewOf(op))
				}
				return views, func() error { return printOperations(g.stdout, resp.Operations) }, nil
			})
		},
	}
	cmd.Flags().StringVarP(&format, "output", "o", "table", "output: table, json or yaml")
	return cmd
}
