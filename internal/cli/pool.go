package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
	corral "github.com/corral-sandbox/corral/client"
)

func newPoolCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "pool",
		Aliases: []string{"pools"},
		Short:   "Create, list and delete warm pools of ready sandboxes",
		Long: `A warm pool keeps SIZE sandboxes of one spec ready. sandbox create --pool
NAME claims one of them at once (it becomes that sandbox, with its name and
labels) and the pool refills in the background; with none ready, the create
is a cold one of the pool's spec, and says so.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newPoolCreateCmd(g), newPoolListCmd(g), newPoolDeleteCmd(g))
	return cmd
}

// poolView is the JSON and YAML form of a pool: the field names are a
// contract for scripts.
type poolView struct {
	Name    string `json:"name" yaml:"name"`
	Size    int32  `json:"size" yaml:"size"`
	Ready   int32  `json:"ready" yaml:"ready"` // unclaimed and ready to claim
	Members int32  `json:"members" yaml:"members"`
	// the spec every member is made of, fixed at create
	Image   string   `json:"image" yaml:"image"`
	Command []string `json:"command" yaml:"command"`
	Created string   `json:"created" yaml:"created"`
}

func poolViewOf(p *corralv1.Pool) poolView {
	return poolView{Name: p.Name, Size: p.Size, Ready: p.Ready, Members: p.Members, Image: p.Spec.GetImage(),
		Command: p.Spec.GetCommand(), Created: stamp(p.CreatedAt)}
}

func newPoolCreateCmd(g *globals) *cobra.Command {
	var (
		image, policyFile, format string
		size                      int32
	)
	cmd := &cobra.Command{
		Use:   "create NAME --size N [--image IMG] [--policy FILE] [-- CMD ARGS...]",
		Short: "Create a warm pool; the gateway fills it in the background",
		Long: `Create a warm pool of SIZE sandboxes. Its image, policy and command are
fixed from now on; the command defaults to one that only keeps the sandbox
running (sleep), so that a claim can exec into it.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkFormat(format); err != nil {
				return err
			}
			name, command := args[0], args[1:]
			if dash := cmd.ArgsLenAtDash(); dash != 1 && len(command) > 0 {
				return fmt.Errorf("unexpected argument %q: give the pool name, then the command after --", command[0])
			}
			text, err := readPolicyFlag(policyFile)
			if err != nil {
				return err
			}
			spec := &corralv1.PoolSpec{Image: image, Command: command, Policy: text}
			c, err := g.dial()
			if err != nil {
				return err
			}
			defer c.Close()
			if image != "" {
				if err := pullForCreate(cmd.Context(), c, image, g.stderr); err != nil {
					return err
				}
			}
			p, err := c.CreatePool(cmd.Context(), &corralv1.CreatePoolRequest{Name: name, Size: size, Spec: spec})
			if err != nil {
				return c.Explain(err)
			}
			if ok, err := printStructured(g.stdout, format, poolViewOf(p)); ok || err != nil {
				return err
			}
			_, err = fmt.Fprintln(g.stdout, p.Name)
			return err
		},
	}
	f := cmd.Flags()
	f.Int32Var(&size, "size", 0, "how many sandboxes to keep ready (required)")
	f.StringVar(&image, "image", "", "image of the members (default: the gateway's default_image)")
	f.StringVar(&policyFile, "policy", "", "YAML policy file of the members")
	f.StringVarP(&format, "output", "o", "table", "output: table (the name), json or yaml")
	_ = cmd.MarkFlagRequired("size")
	return cmd
}

func newPoolListCmd(g *globals) *cobra.Command {
	return listCommand(g, "List the pools with how many members are ready",
		func(ctx context.Context, c *corral.Client) ([]*corralv1.Pool, error) {
			resp, err := c.ListPools(ctx, &corralv1.ListPoolsRequest{})
			return resp.GetPools(), err
		}, poolViewOf, printPools)
}

func newPoolDeleteCmd(g *globals) *cobra.Command {
	return deleteCommand(g, "Delete pools and their unclaimed sandboxes; claimed ones stay",
		func(ctx context.Context, c *corral.Client, name string) (string, error) {
			p, err := c.DeletePool(ctx, &corralv1.DeletePoolRequest{Name: name})
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("deleted pool %s (%d unclaimed sandboxes being deleted)", p.Name, p.Members), nil
		})
}
