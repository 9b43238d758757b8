package cli

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"

	"github.com/spf13/cobra"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
	corral "github.com/corral-sandbox/corral/client"
)

func newExposeCmd(g *globals) *cobra.Command {
	var address string
	cmd := newPortCmd(g, "expose NAME PORT [--address HOST:PORT]",
		"Serve a sandbox's port on an address of the gateway host, and print it",
		func(ctx context.Context, c *corral.Client, name string, port int32) (*corralv1.ExposedPort, error) {
			return c.ExposePort(ctx, &corralv1.ExposePortRequest{Name: name, Port: port, Address: address})
		})
	cmd.Long = "The gateway listens on --address (default 127.0.0.1 and a free port) on its own host and forwards\n" +
		"every connection to 127.0.0.1:PORT inside the sandbox while it runs; while it does not, connections\n" +
		"are reset at once. The address is recorded: it serves again after a gateway restart, until unexpose or\n" +
		"the sandbox's delete."
	cmd.Flags().StringVar(&address, "address", "", "HOST:PORT to serve on, on the gateway host (default 127.0.0.1 and a free port)")
	return cmd
}

func newUnexposeCmd(g *globals) *cobra.Command {
	return newPortCmd(g, "unexpose NAME PORT", "Stop serving a sandbox's exposed port",
		func(ctx context.Context, c *corral.Client, name string, port int32) (*corralv1.ExposedPort, error) {
			return c.UnexposePort(ctx, &corralv1.UnexposePortRequest{Name: name, Port: port})
		})
}

// newPortCmd is a command on NAME PORT that prints the address of the
// exposed port that send returns.
func newPortCmd(g *globals, use, short string,
	send func(ctx context.Context, c *corral.Client, name string, port int32) (*corralv1.ExposedPort, error)) *cobra.Command {
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			port, err := portArg(args[1])
			if err != nil {
				return err
			}
			c, err := g.dial()
			if err != nil {
				return err
			}
			defer c.Close()
			p, err := send(cmd.Context(), c, args[0], port)
			if err != nil {
				return c.Explain(err)
			}
			fmt.Fprintln(g.stdout, p.Address)
			if p.Error != "" {
				fmt.Fprintf(g.stderr, "corral: warning: the gateway does not serve %s now: %s\n", p.Address, p.Error)
			}
			return nil
		},
	}
}

func newPortsCmd(g *globals) *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "ports [NAME]",
		Short: "List the exposed ports of a sandbox, or of every sandbox",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := ""
			if len(args) == 1 {
				name = args[0]
			}
			return query(g, cmd, format, func(ctx context.Context, c *corral.Client) (any, func() error, error) {
				resp, err := c.ListExposedPorts(ctx, &corralv1.ListExposedPortsRequest{Name: name})
				if err != nil {
					return nil, nil, err
				}
				views := make([]exposedView, 0, len(resp.Ports))
				for _, p := range resp.Ports {
					views = append(views, exposedView{Sandbox: p.SandboxName, Port: p.Port, Address: p.Address, Error: p.Error})
				}
				return views, func() error { return printExposed(g.stdout, resp.Ports) }, nil
			})
		},
	}
	cmd.Flags().StringVarP(&format, "output", "o", "table", "output: table, json or yaml")
	return cmd
}

// exposedView is an exposed port as -o json and yaml print it.
type exposedView struct {
	Sandbox string `json:"sandbox" yaml:"sandbox"`
	Port    int32  `json:"port" yaml:"port"`
	Address string `json:"address" yaml:"address"`
	Error   string `json:"error,omitempty" yaml:"error,omitempty"`
}

func printExposed(w io.Writer, list []*corralv1.ExposedPort) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SANDBOX\tPORT\tADDRESS\tSERVED")
	for _, p := range list {
		served := "yes"
		if p.Error != "" {
			served = "no: " + oneLine(p.Error)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", printableText(p.SandboxName), p.Port, p.Address, served)
	}
	return tw.Flush()
}

func portArg(s string) (int32, error) {
	port, err := strconv.Atoi(s)
	if err != nil || port < 1 || port > 65535 {
		return 0, fmt.Errorf("port %q: want 1 to 65535", s)
	}
	return int32(port), nil
}
