package cli

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
	corral "github.com/corral-sandbox/corral/client"
)

// query runs a read-only command: it checks -o, dials the gateway, fetches
// with fetch, and prints the result's view as JSON/YAML or its table.
func query(g *globals, cmd *cobra.Command, format string,
	fetch func(ctx context.Context, c *corral.Client) (view any, table func() error, err error)) error {
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
		return c.Explain(err)
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
			return query(g, cmd, format, func(ctx context.Context, c *corral.Client) (any, func() error, error) {
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
	var (
		limit      int
		pageToken  string
		labels     []string
		phase      string
		selectedBy map[string]string
	)
	cmd := listCommand(g, "List sandboxes, oldest first (every page, or --limit of them)",
		func(ctx context.Context, c *corral.Client) ([]*corralv1.Sandbox, error) {
			req := &corralv1.ListSandboxesRequest{Limit: int32(limit), PageToken: pageToken, Labels: selectedBy, Phase: phase}
			list, next, err := listSandboxes(ctx, c, req)
			if next != "" {
				fmt.Fprintf(g.stderr, "more sandboxes match: add --continue %s\n", next)
			}
			return list, err
		}, viewOf, printSandboxes)
	cmd.PreRunE = func(*cobra.Command, []string) error {
		if limit < 0 {
			return fmt.Errorf("--limit %d: want 1 or more (0: every sandbox)", limit)
		}
		var err error
		selectedBy, err = parseLabels(labels)
		return err
	}
	cmd.Flags().IntVar(&limit, "limit", 0, "list at most this many, and say how to continue (0: every sandbox)")
	cmd.Flags().StringVar(&pageToken, "continue", "", "go on after the last sandbox of an earlier --limit list")
	cmd.Flags().StringArrayVarP(&labels, "label", "l", nil, "only sandboxes with this label (key=value; repeat for more)")
	cmd.Flags().StringVar(&phase, "phase", "", "only sandboxes in this phase (ready, stopped, error, ...)")
	return cmd
}

// listSandboxes asks for req's sandboxes page after page, until req.Limit
// of them (0: all); next continues past the last one when more match.
func listSandboxes(ctx context.Context, c *corral.Client, req *corralv1.ListSandboxesRequest) (list []*corralv1.Sandbox, next string, err error) {
	want := int(req.GetLimit())
	for {
		if want > 0 {
			req.Limit = int32(want - len(list))
		}
		resp, err := c.ListSandboxes(ctx, req)
		if err != nil {
			return list, "", err
		}
		list = append(list, resp.GetSandboxes()...)
		next = resp.GetNextPageToken()
		if next == "" || want > 0 && len(list) >= want {
			return list, next, nil
		}
		req.PageToken = next
	}
}

// listCommand is a `list` command: list fetches the items, which print as
// a table, or as JSON or YAML of their views.
func listCommand[T, V any](g *globals, short string, list func(ctx context.Context, c *corral.Client) ([]T, error),
	view func(T) V, table func(io.Writer, []T) error) *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   short,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return query(g, cmd, format, func(ctx context.Context, c *corral.Client) (any, func() error, error) {
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
			return query(g, cmd, format, func(ctx context.Context, c *corral.Client) (any, func() error, error) {
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
