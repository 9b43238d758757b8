package cli

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
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
			}
			if failed > 0 {
				return &exitError{code: 1}
			}
			return nil
		},
	})
	return cmd
}

func newUpdateCmd(g *globals) *cobra.Command {
	var policyFile string
	cmd := &cobra.Command{
		Use:   "update NAME --policy FILE",
		Short: "Replace the policy of a stopped sandbox; its next start uses it",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if policyFile == "" {
				return errors.New("give the new policy with --policy FILE")
			}
			_, text, err := policy.ReadFile(policyFile)
			if err != nil {
				return fmt.Errorf("--policy: %w", err)
			}
			c, err := g.dial()
			if err != nil {
				return err
			}
			defer c.Close()
			sb, err := c.UpdateSandbox(cmd.Context(), &corralv1.UpdateSandboxRequest{Name: args[0], Policy: text})
			if err != nil {
				return c.explain(err)
			}
			fmt.Fprintf(g.stderr, "sandbox %q: policy replaced; the next start uses it\n", sb.Name)
			return nil
		},
	}
	cmd.Flags().StringVar(&policyFile, "policy", "", "the new policy (YAML)")
	return cmd
}

// summary is a one-line account of what a policy enforces.
func summary(p policy.Policy) string {
	var parts []string
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
	return strings.Join(parts, "; ")
}
