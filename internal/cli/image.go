package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
	corral "github.com/corral-sandbox/corral/client"
)

func newImageCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "image",
		Aliases: []string{"images"},
		Short:   "Pull, list and remove the images of the gateway's driver",
		Long: `Pull, list and remove the images of the gateway's driver. An image is a
registry reference (busybox:latest), a docker save archive
(docker-archive:/abs/path.tar) or an OCI image layout (oci:/abs/dir).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newImagePullCmd(g), newImageListCmd(g), newImageRmCmd(g), newImagePruneCmd(g))
	return cmd
}

// imageView is the JSON and YAML form of an image: the field names are a
// contract for scripts.
type imageView struct {
	ID        string   `json:"id" yaml:"id"`
	Refs      []string `json:"refs" yaml:"refs"`
	Size      int64    `json:"size" yaml:"size"`
	Created   string   `json:"created" yaml:"created"`
	Sandboxes int32    `json:"sandboxes" yaml:"sandboxes"`
}

func imageViewOf(img *corralv1.Image) imageView {
	refs := img.Refs
	if refs == nil {
		refs = []string{}
	}
	return imageView{ID: img.Id, Refs: refs, Size: img.Size, Created: stamp(img.Created), Sandboxes: img.Sandboxes}
}

func newImagePullCmd(g *globals) *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "pull REF",
		Short: "Pull an image into the driver's store, showing its progress on stderr; print its id",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return query(g, cmd, format, func(ctx context.Context, c *corral.Client) (any, func() error, error) {
				img, err := pullImage(ctx, c, args[0], false, g.stderr)
				if err != nil {
					return nil, nil, err
				}
				if img == nil {
					return nil, nil, fmt.Errorf("the gateway ended the pull of %s without the image", args[0])
				}
				return imageViewOf(img), func() error {
					_, err := fmt.Fprintln(g.stdout, img.Id)
					return err
				}, nil
			})
		},
	}
	cmd.Flags().StringVarP(&format, "output", "o", "table", "output: table (the id), json or yaml")
	return cmd
}

func newImageListCmd(g *globals) *cobra.Command {
	return listCommand(g, "List the images of the driver's store",
		func(ctx context.Context, c *corral.Client) ([]*corralv1.Image, error) {
			resp, err := c.ListImages(ctx, &corralv1.ListImagesRequest{})
			return resp.GetImages(), err
		}, imageViewOf, printImages)
}

// printImages is the table of images, one row per name as docker images
// has it (an image without a name has one row, <none>).
func printImages(w io.Writer, list []*corralv1.Image) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "REF\tID\tSIZE\tCREATED\tSANDBOXES")
	for _, img := range list {
		refs := img.Refs
		if len(refs) == 0 {
			refs = []string{"<none>"}
		}
		for _, ref := range refs {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\n", printableText(ref), shortDigest(img.Id), humanSize(img.Size), created(img), img.Sandboxes)
		}
	}
	return tw.Flush()
}

func created(img *corralv1.Image) string {
	if img.Created == nil {
		return "-"
	}
	return age(img.Created) + " ago"
}

func newImageRmCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "rm REF...",
		Aliases: []string{"remove"},
		Short:   "Remove images by name or id; an image a sandbox uses stays",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, refs []string) error {
			c, err := g.dial()
			if err != nil {
				return err
			}
			defer c.Close()
			var errs []error
			for _, ref := range refs {
				img, err := c.RemoveImage(cmd.Context(), &corralv1.RemoveImageRequest{Image: ref})
				if err != nil {
					errs = append(errs, errors.New(corral.Message(c.Explain(err))))
					continue
				}
				fmt.Fprintf(g.stdout, "removed %s (%s)\n", printableText(ref), shortDigest(img.Id))
			}
			return errors.Join(errs...)
		},
	}
}

func newImagePruneCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "prune",
		Short: "Remove the images no sandbox uses that the driver may remove",
		Long: `Remove the images that no sandbox uses and that the driver may remove, and
print them with the space freed. On Docker, only the images corral loaded
from docker-archive: and oci: sources are removed, never the engine's others.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.dial()
			if err != nil {
				return err
			}
			defer c.Close()
			resp, err := c.PruneImages(cmd.Context(), &corralv1.PruneImagesRequest{})
			if err != nil {
				return c.Explain(err)
			}
			for _, img := range resp.Removed {
				names := "<none>"
				if len(img.Refs) > 0 {
					names = printableText(strings.Join(img.Refs, ", "))
				}
				fmt.Fprintf(g.stdout, "removed %s (%s)\n", names, shortDigest(img.Id))
			}
			_, err = fmt.Fprintf(g.stdout, "space freed: %s\n", humanSize(resp.SpaceFreed))
			return err
		},
	}
}
