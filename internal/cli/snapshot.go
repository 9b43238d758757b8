package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
	corral "github.com/corral-sandbox/corral/client"
	"github.com/corral-sandbox/corral/internal/atomicfile"
)

func newSnapshotCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "snapshot",
		Aliases: []string{"snapshots", "snap"},
		Short:   "List, show, delete, export and import snapshots of sandboxes",
		Long: `A snapshot is a sandbox's /sandbox at one instant, with the image, command,
labels and policy it was created with, kept by the gateway (identical files
once, whatever the snapshots). Take one with corral sandbox snapshot NAME
SNAPSHOT; make a sandbox from one with corral sandbox create --from-snapshot
SNAPSHOT, on any driver; several at once with corral sandbox fork.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newSnapshotListCmd(g), newSnapshotGetCmd(g), newSnapshotDeleteCmd(g), newSnapshotExportCmd(g), newSnapshotImportCmd(g))
	return cmd
}

// snapshotView is the JSON and YAML form of a snapshot: the field names
// are a contract for scripts.
type snapshotView struct {
	ID      string            `json:"id" yaml:"id"`
	Name    string            `json:"name" yaml:"name"`
	Tenant  string            `json:"tenant" yaml:"tenant"`
	Sandbox string            `json:"sandbox" yaml:"sandbox"` // taken of; "" when imported
	Image   string            `json:"image" yaml:"image"`
	Command []string          `json:"command" yaml:"command"`
	Labels  map[string]string `json:"labels,omitempty" yaml:"labels,omitempty"`
	Files   int64             `json:"files" yaml:"files"`
	Bytes   int64             `json:"bytes" yaml:"bytes"`
	Created string            `json:"created" yaml:"created"`
}

func snapshotViewOf(s *corralv1.Snapshot) snapshotView {
	return snapshotView{ID: s.Id, Name: s.Name, Tenant: s.Tenant, Sandbox: s.Sandbox, Image: s.Spec.GetImage(),
		Command: s.Spec.GetCommand(), Labels: s.Spec.GetLabels(), Files: s.Files, Bytes: s.Bytes, Created: stamp(s.CreatedAt)}
}

func printSnapshots(w io.Writer, list []*corralv1.Snapshot) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSANDBOX\tFILES\tSIZE\tIMAGE\tCREATED")
	for _, s := range list {
		from := s.Sandbox
		if from == "" {
			from = "(imported)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", s.Name, printableText(from), s.Files, humanSize(s.Bytes),
			printableText(s.Spec.GetImage()), s.CreatedAt.AsTime().Local().Format(time.DateTime))
	}
	return tw.Flush()
}

func newSnapshotListCmd(g *globals) *cobra.Command {
	return listCommand(g, "List the snapshots, oldest first",
		func(ctx context.Context, c *corral.Client) ([]*corralv1.Snapshot, error) { return c.ListSnapshots(ctx) },
		snapshotViewOf, printSnapshots)
}

func newSnapshotGetCmd(g *globals) *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "get SNAPSHOT",
		Short: "Show one snapshot",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return query(g, cmd, format, func(ctx context.Context, c *corral.Client) (any, func() error, error) {
				s, err := c.GetSnapshot(ctx, args[0])
				if err != nil {
					return nil, nil, err
				}
				return snapshotViewOf(s), func() error { return printSnapshots(g.stdout, []*corralv1.Snapshot{s}) }, nil
			})
		},
	}
	cmd.Flags().StringVarP(&format, "output", "o", "table", "output: table, json or yaml")
	return cmd
}

func newSnapshotDeleteCmd(g *globals) *cobra.Command {
	return deleteCommand(g, "Delete snapshots; sandboxes made from them keep their files",
		func(ctx context.Context, c *corral.Client, name string) (string, error) {
			s, err := c.DeleteSnapshot(ctx, name)
			if err != nil {
				return "", err
			}
			return "deleted snapshot " + s.Name, nil
		})
}

func newSnapshotExportCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "export SNAPSHOT FILE",
		Short: "Write a snapshot to FILE (- for stdout) as one archive that corral snapshot import reads",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.dial()
			if err != nil {
				return err
			}
			defer c.Close()
			if args[1] == "-" {
				return c.ExportSnapshot(cmd.Context(), args[0], g.stdout)
			}
			// the file appears whole or not at all
			pr, pw := io.Pipe()
			go func() { pw.CloseWithError(c.ExportSnapshot(cmd.Context(), args[0], pw)) }()
			err = atomicfile.WriteFrom(args[1], pr, 0o600)
			pr.CloseWithError(io.ErrClosedPipe)
			return err
		},
	}
}

func newSnapshotImportCmd(g *globals) *cobra.Command {
	var name, format string
	cmd := &cobra.Command{
		Use:   "import FILE [--name NAME]",
		Short: "Read an exported snapshot from FILE (- for stdin); a hostile archive is refused",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkFormat(format); err != nil {
				return err
			}
			var in io.Reader = os.Stdin
			if args[0] != "-" {
				f, err := os.Open(args[0])
				if err != nil {
					return err
				}
				defer f.Close()
				in = f
			}
			c, err := g.dial()
			if err != nil {
				return err
			}
			defer c.Close()
			s, err := c.ImportSnapshot(cmd.Context(), name, in)
			if err != nil {
				return err
			}
			if ok, err := printStructured(g.stdout, format, snapshotViewOf(s)); ok || err != nil {
				return err
			}
			_, err = fmt.Fprintln(g.stdout, s.Name)
			return err
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "the snapshot's name (default: the name in the archive)")
	cmd.Flags().StringVarP(&format, "output", "o", "table", "output: table (the name), json or yaml")
	return cmd
}

func newSandboxSnapshotCmd(g *globals) *cobra.Command {
	var (
		memory bool
		format string
	)
	cmd := &cobra.Command{
		Use:   "snapshot NAME SNAPSHOT [--memory]",
		Short: "Take a snapshot of a sandbox's /sandbox",
		Long: `Take a snapshot of a sandbox's /sandbox, with the image, command, labels and
policy it was created with. A running sandbox is paused for the instant of
the copy (so the copy is consistent) and resumed; a stopped one is copied as
it is. The snapshot is listed once it is whole.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkFormat(format); err != nil {
				return err
			}
			c, err := g.dial()
			if err != nil {
				return err
			}
			defer c.Close()
			s, err := c.Snapshot(cmd.Context(), args[0], args[1], memory)
			if err != nil {
				return err
			}
			if ok, err := printStructured(g.stdout, format, snapshotViewOf(s)); ok || err != nil {
				return err
			}
			_, err = fmt.Fprintf(g.stdout, "%s: %d files, %s\n", s.Name, s.Files, humanSize(s.Bytes))
			return err
		},
	}
	cmd.Flags().BoolVar(&memory, "memory", false, "checkpoint the processes and their memory too (gVisor tier)")
	cmd.Flags().StringVarP(&format, "output", "o", "table", "output: table, json or yaml")
	return cmd
}

func newForkCmd(g *globals) *cobra.Command {
	var (
		count   int
		prefix  string
		labels  []string
		detach  bool
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "fork NAME --count N [--name-prefix P]",
		Short: "Make N sandboxes from a snapshot of one, in parallel, and wait until they are ready",
		Long: `Take a snapshot of a sandbox (paused for the instant of the copy when it
runs) and make N sandboxes from it at once, named P-1 … P-N (P defaults to
NAME-fork). Each gets its own copy of /sandbox: a write in one is not seen
in another. Prints their ids.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			parsed, err := parseLabels(labels)
			if err != nil {
				return err
			}
			if len(parsed) == 0 {
				parsed = nil // the sandbox's
			}
			c, err := g.dial()
			if err != nil {
				return err
			}
			defer c.Close()
			forks, err := c.Fork(cmd.Context(), args[0], count, corral.ForkOptions{NamePrefix: prefix, Labels: parsed, Detach: true})
			if err != nil {
				return err
			}
			if !detach {
				if err := waitFor(cmd.Context(), c, forks, corral.Running, timeout, g.stderr); err != nil {
					return err
				}
			}
			ids := make([]string, len(forks))
			for i, sb := range forks {
				ids[i] = sb.Id
			}
			_, err = fmt.Fprintln(g.stdout, strings.Join(ids, "\n"))
			return err
		},
	}
	cmd.Flags().IntVar(&count, "count", 1, "how many sandboxes to make")
	cmd.Flags().StringVar(&prefix, "name-prefix", "", "name them PREFIX-1 … PREFIX-N (default: NAME-fork)")
	cmd.Flags().StringArrayVar(&labels, "label", nil, "the forks' labels, key=value (repeatable; default: the sandbox's)")
	cmd.Flags().BoolVarP(&detach, "detach", "d", false, "return once they are recorded, without waiting")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "give up waiting after this long (0: until ready or error)")
	return cmd
}
