// Package cli is the corral command line: the gateway command and the
// client commands that talk to a gateway over its API.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	corral "github.com/corral-sandbox/corral/client"
	"github.com/corral-sandbox/corral/internal/supervisecmd"
)

// globals are the flags every client command shares.
type globals struct {
	home    string
	gateway string
	context string
	token   string
	tenant  string
	stdout  io.Writer
	stderr  io.Writer
}

// Main runs the corral command line with os.Args and returns the exit code.
func Main() int {
	g := &globals{stdout: os.Stdout, stderr: os.Stderr}
	root := newRoot(g)
	root.SetArgs(os.Args[1:])
	err := root.ExecuteContext(context.Background())
	if err == nil {
		return 0
	}
	var supervised *supervisecmd.ExitError
	if errors.As(err, &supervised) {
		return supervised.Code
	}
	var exit *exitError
	if errors.As(err, &exit) {
		if exit.msg != "" {
			fmt.Fprintln(g.stderr, "corral:", exit.msg)
		}
		return exit.code
	}
	fmt.Fprintln(g.stderr, "corral:", corral.Message(err))
	return 1
}

// exitError ends the program with a code of its own (exec passes one through).
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func newRoot(g *globals) *cobra.Command {
	root := &cobra.Command{
		Use:           "corral",
		Short:         "corral runs isolated sandboxes for AI agents and other untrusted workloads",
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	root.PersistentFlags().StringVar(&g.home, "home", "", "gateway home directory (default $CORRAL_HOME, /var/lib/corral as root, else $XDG_DATA_HOME/corral)")
	root.PersistentFlags().StringVar(&g.gateway, "gateway", "", "gateway address, unix:///path/to/corral.sock (default: the socket in the home directory)")
	root.PersistentFlags().StringVar(&g.context, "context", "", "talk to the gateway of this context (see corral context)")
	root.PersistentFlags().StringVar(&g.token, "token", "", "a bearer token to call as (default $CORRAL_TOKEN, else the context's)")
	root.PersistentFlags().StringVar(&g.tenant, "tenant", "", "the tenant to act in, for an admin (default $CORRAL_TENANT, else the context's, else your own)")
	root.AddCommand(newGatewayCmd(g), newSandboxCmd(g), newImageCmd(g), newPoolCmd(g), newSnapshotCmd(g), supervisecmd.New(), newContextCmd(), newPolicyCmd(g), newMCPCmd(g), newSecretCmd(g),
		newTenantCmd(g), newTokenCmd(g))
	root.SetOut(g.stdout)
	root.SetErr(g.stderr)
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return fmt.Errorf("%w (see %s --help)", err, cmd.CommandPath())
	})
	return root
}

func newSandboxCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "sandbox",
		Aliases: []string{"sandboxes", "sb"},
		Short:   "Create, inspect, stop, start and delete sandboxes",
		Args:    cobra.NoArgs, // an unknown subcommand is an error, not help
		RunE:    func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(
		newCreateCmd(g), newGetCmd(g), newListCmd(g), newStopCmd(g), newStartCmd(g), newPauseCmd(g), newResumeCmd(g),
		newDeleteCmd(g), newHistoryCmd(g), newWatchCmd(g), newExecCmd(g), newLogsCmd(g), newUpdateCmd(g), newCpCmd(g),
		newSandboxPolicyCmd(g), newDenialsCmd(g), newSandboxSnapshotCmd(g), newForkCmd(g),
		newPortForwardCmd(g), newExposeCmd(g), newUnexposeCmd(g), newPortsCmd(g),
	)
	return cmd
}
