package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
	corral "github.com/corral-sandbox/corral/client"
)

// denialView is the JSON form of a denial: the field names are a contract
// for scripts.
type denialView struct {
	Time    string `json:"time"`
	Verdict string `json:"verdict"`
	Host    string `json:"host"`
	Port    int32  `json:"port"`
	Address string `json:"address,omitempty"`
	Method  string `json:"method,omitempty"`
	Path    string `json:"path,omitempty"`
	Policy  string `json:"policy,omitempty"`
	Reason  string `json:"reason"`
}

func newDenialsCmd(g *globals) *cobra.Command {
	var (
		follow bool
		format string
	)
	cmd := &cobra.Command{
		Use:   "denials NAME [-f]",
		Short: "List the connections and requests the sandbox's egress proxy refused or audited",
		Long: `List what the sandbox's egress proxy refused (verdict denied) or let pass
under enforcement: audit (verdict audited), oldest first: time, destination
host and port, the address it resolved to, the method and path of an
inspected request, and the rule or the reason. With -f, keep printing new
ones. -o json prints one JSON object a line.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return streamTable(g, cmd, follow, format, "TIME\tVERDICT\tHOST\tPORT\tADDRESS\tMETHOD\tPATH\tPOLICY\tREASON",
				func(ctx context.Context, c *corral.Client) (func() (*corralv1.Denial, error), error) {
					stream, err := c.SandboxDenials(ctx, &corralv1.SandboxDenialsRequest{Name: args[0], Follow: follow})
					if err != nil {
						return nil, err
					}
					return stream.Recv, nil
				}, denialRow)
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new denials")
	cmd.Flags().StringVarP(&format, "output", "o", "table", "output: table or json (a line each)")
	return cmd
}

// denialRow is a denial's JSON form and table fields.
func denialRow(d *corralv1.Denial) (any, []string) {
	v := denialView{Time: stamp(d.Time), Verdict: d.Verdict, Host: d.Host, Port: d.Port, Address: d.Address,
		Method: d.Method, Path: d.Path, Policy: d.Policy, Reason: d.Reason}
	return v, []string{v.Time, v.Verdict, v.Host, fmt.Sprint(v.Port), v.Address, v.Method, v.Path, v.Policy, v.Reason}
}

// streamTable prints what a ledger stream sends (header, then a row
// each), oldest first: an aligned table, or with follow a tab-separated
// line as each comes, or -o json a JSON object a line.
func streamTable[T any](g *globals, cmd *cobra.Command, follow bool, format, header string,
	open func(ctx context.Context, c *corral.Client) (func() (T, error), error), row func(T) (any, []string)) error {
	if format != "table" && format != "json" {
		return fmt.Errorf("-o %q: want table or json", format)
	}
	c, err := g.dial()
	if err != nil {
		return err
	}
	defer c.Close()
	recv, err := open(cmd.Context(), c)
	if err != nil {
		return c.Explain(err)
	}
	// Without -f the table is aligned at the end; with it, each row goes
	// out as it comes, tab-separated.
	var out io.Writer = g.stdout
	if !follow {
		tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
		defer tw.Flush()
		out = tw
	}
	if format == "table" {
		fmt.Fprintln(out, header)
	}
	for {
		v, err := recv()
		if errors.Is(err, io.EOF) || cmd.Context().Err() != nil {
			return nil
		}
		if err != nil {
			return c.Explain(err)
		}
		view, fields := row(v)
		if err := printRow(out, format, view, fields); err != nil {
			return err
		}
	}
}

// printRow writes a row: its view as a JSON line, or its fields
// tab-separated, each made printable (a host or path comes from the
// sandbox).
func printRow(w io.Writer, format string, view any, fields []string) error {
	if format == "json" {
		return json.NewEncoder(w).Encode(view)
	}
	for i, f := range fields {
		if f == "" {
			f = "-"
		}
		fields[i] = strings.ReplaceAll(printableText(f), "\t", " ")
	}
	_, err := fmt.Fprintln(w, strings.Join(fields, "\t"))
	return err
}
