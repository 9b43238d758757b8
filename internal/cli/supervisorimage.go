package cli

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/corral-sandbox/corral/internal/driver/kubernetes"
)

// newSupervisorImageCmd writes the image the kubernetes driver's Pods take
// their supervisor from.
func newSupervisorImageCmd(g *globals) *cobra.Command {
	var out, tag string
	cmd := &cobra.Command{
		Use:   "supervisor-image -o FILE [--tag REF]",
		Short: "Write the image holding this build's supervisor, for --driver kubernetes",
		Long: `Write, as a docker-archive tar, an image whose one file is this build's static
corral-supervise (the one beside this corral, else corral itself) at
/corral-supervise. Push it to a registry the cluster pulls from (or import it
on each node: ctr -n k8s.io images import FILE) and name it to the gateway with
--kube-supervisor-image.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				return fmt.Errorf("give the file to write with -o FILE")
			}
			exe, err := os.Executable()
			if err != nil {
				return err
			}
			bin := filepath.Join(filepath.Dir(exe), "corral-supervise")
			if _, err := os.Stat(bin); err != nil {
				bin = exe
			}
			if err := kubernetes.WriteSupervisorImage(out, tag, bin); err != nil {
				return err
			}
			fmt.Fprintf(g.stdout, "wrote %s (%s, from %s)\n", out, tag, bin)
			return nil
		},
	}
	cmd.Flags().StringVarP(&out, "output", "o", "", "the tar file to write")
	cmd.Flags().StringVar(&tag, "tag", "corral-supervise:latest", "the image's name in the tar")
	return cmd
}
