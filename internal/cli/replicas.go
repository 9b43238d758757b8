package cli

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
	corral "github.com/corral-sandbox/corral/client"
)

func newReplicasCmd(g *globals) *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "replicas",
		Short: "List the gateways of the store: which are alive, which one leads (and owns every sandbox), lease ages",
		Long: `List the gateways that share this gateway's store, the leader first. On a
PostgreSQL store several replicas can run on one host and one home: the leader
holds the store's lease (its EPOCH grows with every leader) and owns every
sandbox; the others are standbys, which forward their calls to it and take
over within the lease's TTL when it goes. SEEN is the age of each one's last
word (every second); LEASE is how long the leader has held the lease. A gateway
on SQLite is its store's only one. Any replica answers.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return query(g, cmd, format, func(ctx context.Context, c *corral.Client) (any, func() error, error) {
				resp, err := c.ListReplicas(ctx, &corralv1.ListReplicasRequest{})
				if err != nil {
					return nil, nil, err
				}
				views := make([]replicaView, 0, len(resp.Replicas))
				for _, r := range resp.Replicas {
					views = append(views, replicaViewOf(r))
				}
				return views, func() error { return printReplicas(g.stdout, resp) }, nil
			})
		},
	}
	cmd.Flags().StringVarP(&format, "output", "o", "table", "output: table, json or yaml")
	return cmd
}

// replicaView is a replica as -o json and yaml print it.
type replicaView struct {
	ID         string `json:"id" yaml:"id"`
	Role       string `json:"role" yaml:"role"`
	PID        int64  `json:"pid" yaml:"pid"`
	Host       string `json:"host" yaml:"host"`
	Home       string `json:"home" yaml:"home"`
	Listen     string `json:"listen,omitempty" yaml:"listen,omitempty"`
	Alive      bool   `json:"alive" yaml:"alive"`
	Leader     bool   `json:"leader" yaml:"leader"`
	Epoch      int64  `json:"epoch,omitempty" yaml:"epoch,omitempty"`
	Sandboxes  int64  `json:"sandboxes" yaml:"sandboxes"`
	StartedAt  string `json:"started_at" yaml:"started_at"`
	SeenAt     string `json:"seen_at" yaml:"seen_at"`
	LeaseSince string `json:"lease_since,omitempty" yaml:"lease_since,omitempty"`
}

func replicaViewOf(r *corralv1.Replica) replicaView {
	return replicaView{ID: r.Id, Role: replicaRole(r), PID: r.Pid, Host: r.Host, Home: r.Home, Listen: r.Listen,
		Alive: r.Alive, Leader: r.Leader, Epoch: r.Epoch, Sandboxes: r.Sandboxes,
		StartedAt: stamp(r.StartedAt), SeenAt: stamp(r.SeenAt), LeaseSince: stamp(r.LeaseSince)}
}

// replicaRole is leader, standby, or gone for one not seen within the
// lease's TTL.
func replicaRole(r *corralv1.Replica) string {
	switch {
	case !r.Alive:
		return "gone"
	case r.Leader:
		return "leader"
	}
	return "standby"
}

func printReplicas(w io.Writer, resp *corralv1.ListReplicasResponse) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "REPLICA\tROLE\tPID\tHOST\tLISTEN\tEPOCH\tSANDBOXES\tSEEN\tLEASE")
	for _, r := range resp.Replicas {
		listen, epoch, lease := dash(r.Listen), "-", "-"
		if r.Leader {
			epoch, lease = fmt.Sprint(r.Epoch), age(r.LeaseSince)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%d\t%s\t%s\n", r.Id, replicaRole(r), r.Pid, printableText(r.Host), printableText(listen),
			epoch, r.Sandboxes, age(r.SeenAt), lease)
	}
	if ttl := resp.GetLeaseTtl(); ttl != nil && len(resp.Replicas) > 1 {
		fmt.Fprintf(tw, "\nlease TTL %s: a standby takes over within it when the leader goes\n", ttl.AsDuration())
	}
	return tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
