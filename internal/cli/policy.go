package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
	"github.com/corral-sandbox/corral/internal/driver/kubernetes"
	"github.com/corral-sandbox/corral/internal/egress"
	"github.com/corral-sandbox/corral/internal/policy"
)

func newPolicyCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "policy", Short: "Work with sandbox policies"}
	cmd.AddCommand(&cobra.Command{
		Use:   "check FILE...",
		Short: "Validate policy files, without a gateway",
		Long: `Validate policy files. Each valid file is summed up on stdout; the first
error of each invalid one is printed with its file, line and field, and the
exit code is 1.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, files []string) error {
			failed := 0
			for _, f := range files {
				p, _, err := policy.ReadFile(f)
				if err != nil {
					fmt.Fprintln(g.stderr, "corral:", err)
					failed++
					continue
				}
				fmt.Fprintf(g.stdout, "%s: valid: %s\n", f, summary(p))
				if not := kubernetes.Unenforced(p); len(not) > 0 {
					fmt.Fprintf(g.stdout, "%s: on --driver kubernetes: %s\n", f, strings.Join(not, "; "))
				}
			}
			if failed > 0 {
				return &exitError{code: 1}
			}
			return nil
		},
	})
	return cmd
}

const setPolicyLong = `Replace the policy of a sandbox. A stopped sandbox takes the new policy
whole at its next start. A running one takes it only when nothing but its
network_policies differ: its egress proxy enforces the new rules at once,
and closes the open connections they no longer allow; files, process and
limits stay as they are for an incarnation.`

func newUpdateCmd(g *globals) *cobra.Command {
	return newSetPolicyCmd(g, "update NAME --policy FILE", "policy", "")
}

// newSandboxPolicyCmd is `sandbox policy set`, update's other name.
func newSandboxPolicyCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "policy", Short: "Work with the policy of a sandbox", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() }}
	cmd.AddCommand(newSetPolicyCmd(g, "set NAME --file FILE", "file", "f"))
	return cmd
}

// newSetPolicyCmd is a command that replaces a sandbox's policy with the
// file its flag names.
func newSetPolicyCmd(g *globals, use, flag, shorthand string) *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   use,
		Short: "Replace the policy of a sandbox (of a running one, the network part only)",
		Long:  setPolicyLong,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return setPolicy(g, cmd, args[0], "--"+flag, file)
		},
	}
	cmd.Flags().StringVarP(&file, flag, shorthand, "", "the new policy (YAML)")
	return cmd
}

func setPolicy(g *globals, cmd *cobra.Command, name, flag, file string) error {
	if file == "" {
		return fmt.Errorf("give the new policy with %s FILE", flag)
	}
	_, text, err := policy.ReadFile(file)
	if err != nil {
		return fmt.Errorf("%s: %w", flag, err)
	}
	c, err := g.dial()
	if err != nil {
		return err
	}
	defer c.Close()
	sb, err := c.UpdateSandbox(cmd.Context(), &corralv1.UpdateSandboxRequest{Name: name, Policy: text})
	if err != nil {
		return c.Explain(err)
	}
	if sb.DesiredState == "stopped" && sb.Phase == "stopped" {
		fmt.Fprintf(g.stderr, "sandbox %q: policy replaced; the next start uses it\n", sb.Name)
	} else {
		fmt.Fprintf(g.stderr, "sandbox %q: network rules replaced; in force now\n", sb.Name)
	}
	return nil
}

// summary is a one-line account of what a policy enforces.
func summary(p policy.Policy) string {
	var parts []string
	if p.GVisor() {
		parts = append(parts, "isolation gvisor (gVisor's kernel; no Landlock there)")
	}
	switch {
	case p.Lifecycle.MemorySnapshots:
		parts = append(parts, "memory snapshots and pause --memory (gVisor's own network stack, loopback only: no egress, no ports from outside)")
	case p.GVisor():
		parts = append(parts, "memory snapshots: off (set lifecycle.memory_snapshots: true; the host's network stack cannot be checkpointed)")
	default:
		parts = append(parts, "memory snapshots: gVisor tier only (CRIU cannot restore the Landlock domain every sandbox here runs in)")
	}
	if fs := p.Filesystem; fs.Set {
		s := fmt.Sprintf("files: %d read-only, %d read-write", len(fs.ReadOnly), len(fs.ReadWrite))
		if fs.IncludeWorkdir {
			s += " and /sandbox"
		}
		parts = append(parts, s+", nothing else (landlock "+p.Landlock.Compatibility+")")
	} else {
		parts = append(parts, "files: no lists (the driver's read-only root)")
	}
	if u := p.Process.RunAsUser; u != nil {
		parts = append(parts, fmt.Sprintf("user %d", *u))
	}
	parts = append(parts, "seccomp "+p.Process.Seccomp)
	if p.Process.NoNewPrivileges {
		parts = append(parts, "no_new_privs")
	}
	l := p.Limits
	if l.MemoryBytes > 0 {
		parts = append(parts, fmt.Sprintf("memory %d MiB", l.MemoryBytes>>20))
	}
	if l.CPUMillis > 0 {
		parts = append(parts, fmt.Sprintf("cpus %.2f", float64(l.CPUMillis)/1000))
	}
	if l.Pids > 0 {
		parts = append(parts, fmt.Sprintf("pids %d", l.Pids))
	}
	if l.TmpBytes > 0 {
		parts = append(parts, fmt.Sprintf("/tmp %d MiB", l.TmpBytes>>20))
	}
	if l.DiskBytes > 0 {
		parts = append(parts, fmt.Sprintf("/sandbox %d MiB", l.DiskBytes>>20))
	}
	parts = append(parts, "network: "+egress.Describe(p.Network))
	return strings.Join(parts, "; ")
}
