package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
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
			if format != "table" && format != "json" {
				return fmt.Errorf("-o %q: want table or json", format)
			}
			c, err := g.dial()
			if err != nil {
				return err
			}
			defer c.Close()
			stream, err := c.SandboxDenials(cmd.Context(), &corralv1.SandboxDenialsRequest{Name: args[0], Follow: follow})
			if err != nil {
				return c.Explain(err)
			}
			// Without -f the table is aligned at the end; with it, each
			// row goes out as it comes, tab-separated.
			var out io.Writer = g.stdout
			if !follow {
				tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
				defer tw.Flush()
				out = tw
			}
			if format == "table" {
				fmt.Fprintln(out, "TIME\tVERDICT\tHOST\tPORT\tADDRESS\tMETHOD\tPATH\tPOLICY\tREASON")
			}
			for {
				d, err := stream.Recv()
				if errors.Is(err, io.EOF) || cmd.Context().Err() != nil {
					return nil
				}
				if err != nil {
					return c.Explain(err)
				}
				if err := printDenial(out, format, d); err != nil {
					return err
				}
			}
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new denials")
	cmd.Flags().StringVarP(&format, "output", "o", "table", "output: table or json (a line each)")
	return cmd
}

// printDenial writes one denial: a tab-separated line (each field made
// printable: a host or path comes from the sandbox), or a JSON line.
func printDenial(w io.Writer, format string, d *corralv1.Denial) error {
	v := denialView{Time: stamp(d.Time), Verdict: d.Verdict, Host: d.Host, Port: d.Port, Address: d.Address,
		Method: d.Method, Path: d.Path, Policy: d.Policy, Reason: d.Reason}
	if format == "json" {
		return json.NewEncoder(w).Encode(v)
	}
	fields := []string{v.Time, v.Verdict, v.Host, fmt.Sprint(v.Port), v.Address, v.Method, v.Path, v.Policy, v.Reason}
	for i, f := range fields {
		if f == "" {
			f = "-"
		}
		fields[i] = strings.ReplaceAll(printableText(f), "\t", " ")
	}
	_, err := fmt.Fprintln(w, strings.Join(fields, "\t"))
	return err
}
