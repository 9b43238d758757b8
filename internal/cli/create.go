package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
	corral "github.com/corral-sandbox/corral/client"
	"github.com/corral-sandbox/corral/internal/policy"
)

func newCreateCmd(g *globals) *cobra.Command {
	var (
		name, image, policyFile, requestID, format, restart, pool, fromSnapshot string
		maxRestarts                                                             int32
		labels, addHosts                                                        []string
		detach                                                                  bool
		timeout                                                                 time.Duration
	)
	cmd := &cobra.Command{
		Use:   "create --name NAME [--pool POOL | --from-snapshot SNAPSHOT | --image IMG [--policy FILE] [-- CMD ARGS...]] [--label k=v] [--detach]",
		Short: "Create a sandbox and wait until it is ready",
		Long: `Create a sandbox. Without --detach, wait until it is ready (exit 0) or
in error (exit 1), showing its progress on stderr; then print its id.
With --image, the image is pulled first when the gateway's pull policy
says a create would pull it, with the pull's progress on stderr.
With --pool, a ready sandbox of that pool is claimed at once (it takes the
name and labels); when the pool has none ready, the pool's spec is created
cold, and a line on stderr says so.
With --from-snapshot, /sandbox holds the snapshot's files before the first
start, and the sandbox runs the snapshot's image, command, labels and
policy, except what --image, a command, --label or --policy give.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkFormat(format); err != nil {
				return err
			}
			var command []string
			if dash := cmd.ArgsLenAtDash(); dash >= 0 {
				if dash > 0 {
					return fmt.Errorf("unexpected argument %q before --; the sandbox name goes in --name", args[0])
				}
				command = args
			} else if len(args) > 0 {
				return fmt.Errorf("unexpected argument %q: give the sandbox name with --name and the command after --", args[0])
			}
			parsed, err := parseLabels(labels)
			if err != nil {
				return err
			}
			spec := &corralv1.SandboxSpec{Image: image, Command: command, Labels: parsed,
				RestartPolicy: restart, MaxRestarts: maxRestarts, AddHosts: addHosts}
			if spec.Policy, err = readPolicyFlag(policyFile); err != nil {
				return err
			}
			c, err := g.dial()
			if err != nil {
				return err
			}
			defer c.Close()
			ctx := cmd.Context()
			pull := image
			if fromSnapshot != "" && image == "" {
				snap, err := c.GetSnapshot(ctx, fromSnapshot)
				if err != nil {
					return err
				}
				pull = snap.Spec.GetImage()
			}
			if pull != "" {
				if err := pullForCreate(ctx, c, pull, g.stderr); err != nil {
					return err
				}
			}
			resp, err := c.CreateSandbox(ctx, &corralv1.CreateSandboxRequest{Name: name, Spec: spec, RequestId: requestID, Pool: pool,
				FromSnapshot: fromSnapshot})
			if err != nil {
				return c.Explain(err)
			}
			if pool != "" && !resp.FromPool && resp.PoolReason != "" {
				fmt.Fprintf(g.stderr, "not from the pool: %s\n", resp.PoolReason)
			}
			sb := resp.Sandbox
			if !detach {
				err := waitFor(ctx, c, []*corralv1.Sandbox{sb}, corral.Running, timeout, g.stderr)
				if err != nil {
					return err
				}
				if sb, err = c.GetSandbox(ctx, &corralv1.GetSandboxRequest{Name: sb.Id}); err != nil {
					return c.Explain(err)
				}
			}
			if ok, err := printStructured(g.stdout, format, viewOf(sb)); ok || err != nil {
				return err
			}
			fmt.Fprintln(g.stdout, sb.Id)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&name, "name", "", "sandbox name: a DNS label (lower-case letters, digits, '-')")
	f.StringVar(&image, "image", "", "image to run (default: the gateway's default_image)")
	f.StringVar(&pool, "pool", "", "claim a ready sandbox of this warm pool (see corral pool)")
	f.StringVar(&fromSnapshot, "from-snapshot", "", "make the sandbox from this snapshot: its files, image, command, labels and policy (see corral snapshot)")
	f.StringVar(&policyFile, "policy", "", "YAML policy file")
	f.StringArrayVar(&labels, "label", nil, "label key=value (repeatable)")
	f.StringArrayVar(&addHosts, "add-host", nil, "pin a name for the egress proxy: NAME:IP (repeatable), as docker run --add-host")
	f.BoolVarP(&detach, "detach", "d", false, "return once the sandbox is recorded, without waiting")
	f.StringVar(&restart, "restart", "", "restart policy when the main process exits: never, on_failure (default) or always")
	f.Int32Var(&maxRestarts, "max-restarts", 0, "restart at most this many times (default 5)")
	f.StringVar(&requestID, "request-id", "", "idempotency key: a retried create with the same id returns the same sandbox")
	f.DurationVar(&timeout, "timeout", 0, "give up waiting after this long (0: until ready or error)")
	f.StringVarP(&format, "output", "o", "table", "output: table (the id), json or yaml")
	return cmd
}

// pullForCreate pulls what the create of image would pull, showing the
// progress; a driver that keeps no images (the fake) has nothing to pull.
func pullForCreate(ctx context.Context, c *corral.Client, image string, progress io.Writer) error {
	_, err := pullImage(ctx, c, image, true, progress)
	if status.Code(err) == codes.Unimplemented {
		return nil
	}
	return c.Explain(err)
}

// readPolicyFlag reads the file a --policy flag names; none is no policy.
func readPolicyFlag(file string) (string, error) {
	if file == "" {
		return "", nil
	}
	_, text, err := policy.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("--policy: %w", err)
	}
	return text, nil
}

// parseLabels reads --label flags: key=value each.
func parseLabels(flags []string) (map[string]string, error) {
	labels := map[string]string{}
	for _, l := range flags {
		k, v, ok := strings.Cut(l, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--label %q: want key=value", l)
		}
		labels[k] = v
	}
	return labels, nil
}
