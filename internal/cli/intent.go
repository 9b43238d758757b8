package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
	corral "github.com/corral-sandbox/corral/client"
)

// intentCmd describes a command that changes the intent of sandboxes.
type intentCmd struct {
	use, short, long string
	// call sends the request for one sandbox and returns its record.
	call func(ctx context.Context, c *corral.Client, name string, f intentFlags) (*corralv1.Sandbox, error)
	// wait is the goal the command waits for unless --detach.
	wait      corral.Goal
	canForce  bool // --force and --all are offered
	canMemory bool // --memory is offered
}

// intentFlags are the flags an intent command passes to its call.
type intentFlags struct {
	force, assumeGone, memory bool
	reason                    string
}

func newIntentCmd(g *globals, ic intentCmd) *cobra.Command {
	var (
		detach, all bool
		flags       intentFlags
		timeout     time.Duration
	)
	cmd := &cobra.Command{
		Use:   ic.use,
		Short: ic.short,
		Long:  ic.long,
		RunE: func(cmd *cobra.Command, names []string) error {
			if all && len(names) > 0 {
				return errors.New("give sandbox names or --all, not both")
			}
			if !all && len(names) == 0 {
				return fmt.Errorf("no sandbox named (see %s --help)", cmd.CommandPath())
			}
			c, err := g.dial()
			if err != nil {
				return err
			}
			defer c.Close()
			ctx := cmd.Context()
			if all {
				list, _, err := listSandboxes(ctx, c, &corralv1.ListSandboxesRequest{})
				if err != nil {
					return c.Explain(err)
				}
				for _, sb := range list {
					names = append(names, sb.Name)
				}
			}
			var (
				errs    []error
				targets []*corralv1.Sandbox
			)
			for _, name := range names {
				sb, err := ic.call(ctx, c, name, flags)
				if err != nil {
					errs = append(errs, errors.New(corral.Message(c.Explain(err))))
					continue
				}
				targets = append(targets, sb)
			}
			if !detach && len(targets) > 0 {
				err := waitFor(ctx, c, targets, ic.wait, timeout, g.stderr)
				if err != nil {
					errs = append(errs, err)
				}
			}
			for _, sb := range targets {
				fmt.Fprintln(g.stdout, sb.Name)
			}
			return errors.Join(errs...)
		},
	}
	f := cmd.Flags()
	f.BoolVarP(&detach, "detach", "d", false, "return once the request is recorded, without waiting")
	f.DurationVar(&timeout, "timeout", 0, "give up waiting after this long (0: until done or error)")
	if ic.canForce {
		f.BoolVar(&flags.force, "force", false, "skip the graceful stop and cancel any driver call in flight")
		f.BoolVar(&flags.assumeGone, "assume-gone", false, "with --force: remove the record without the driver's confirmation (journaled; needs --reason)")
		f.StringVar(&flags.reason, "reason", "", "why the compute is known to be gone (for --assume-gone)")
		f.BoolVar(&all, "all", false, "act on every sandbox")
	}
	if ic.canMemory {
		f.BoolVar(&flags.memory, "memory", false, "checkpoint the processes and memory out to the gateway's disk and free the memory (gVisor tier with lifecycle.memory_snapshots)")
	}
	return cmd
}

func newStopCmd(g *globals) *cobra.Command {
	return newIntentCmd(g, intentCmd{
		use: "stop NAME...", short: "Stop sandboxes and wait until they are stopped",
		call: func(ctx context.Context, c *corral.Client, name string, _ intentFlags) (*corralv1.Sandbox, error) {
			return c.StopSandbox(ctx, &corralv1.StopSandboxRequest{Name: name})
		},
		wait: corral.Stopped,
	})
}

func newStartCmd(g *globals) *cobra.Command {
	return newIntentCmd(g, intentCmd{
		use: "start NAME...", short: "Start stopped sandboxes and wait until they are ready",
		call: func(ctx context.Context, c *corral.Client, name string, _ intentFlags) (*corralv1.Sandbox, error) {
			return c.StartSandbox(ctx, &corralv1.StartSandboxRequest{Name: name})
		},
		wait: corral.Running,
	})
}

func newPauseCmd(g *globals) *cobra.Command {
	return newIntentCmd(g, intentCmd{
		use: "pause NAME...", short: "Freeze every process of running sandboxes, memory kept, and wait until they are paused",
		long: `Freeze every process of running sandboxes: their memory is kept and they
use no CPU. A paused sandbox stays paused across gateway restarts and is never
restarted by its restart policy; resume (or start) thaws the same incarnation,
stop and delete work on it. An exec, a file operation or a port of a paused
sandbox is refused, unless its policy says lifecycle.auto_resume: true, which
resumes it first.

With --memory the processes are checkpointed out instead, memory and all, to
the gateway's disk (runsc checkpoint), and the memory is freed; resume
restores them where they were (runsc restore). Only the gVisor tier can, on a
policy with lifecycle.memory_snapshots: true; a stop ends the checkpointed
processes as it ends running ones.`,
		call: func(ctx context.Context, c *corral.Client, name string, f intentFlags) (*corralv1.Sandbox, error) {
			return c.PauseSandbox(ctx, &corralv1.PauseSandboxRequest{Name: name, Memory: f.memory})
		},
		wait:      corral.Paused,
		canMemory: true,
	})
}

func newResumeCmd(g *globals) *cobra.Command {
	return newIntentCmd(g, intentCmd{
		use: "resume NAME...", short: "Thaw paused sandboxes and wait until they are ready",
		call: func(ctx context.Context, c *corral.Client, name string, _ intentFlags) (*corralv1.Sandbox, error) {
			return c.ResumeSandbox(ctx, &corralv1.ResumeSandboxRequest{Name: name})
		},
		wait: corral.Running,
	})
}

func newDeleteCmd(g *globals) *cobra.Command {
	return newIntentCmd(g, intentCmd{
		use: "delete NAME... | --all", short: "Delete sandboxes, in any phase, and wait until they are gone",
		long: `Delete sandboxes in any phase, even while another operation is in flight.
The compute object is stopped gracefully and removed, then the record. With
--force the graceful stop is skipped. When the driver cannot confirm the
removal the sandbox stays visible as deleting, with the reason, and the
gateway keeps trying; for a driver that will not answer again,
--force --assume-gone --reason WHY removes the record anyway (journaled with
who and why; a compute object that is left is removed as an orphan).`,
		call: func(ctx context.Context, c *corral.Client, name string, f intentFlags) (*corralv1.Sandbox, error) {
			resp, err := c.DeleteSandbox(ctx, &corralv1.DeleteSandboxRequest{Name: name, Force: f.force, AssumeGone: f.assumeGone, Reason: f.reason})
			return resp.GetSandbox(), err
		},
		wait:     corral.Deleted,
		canForce: true,
	})
}
