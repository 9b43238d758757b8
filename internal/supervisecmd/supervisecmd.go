// Package supervisecmd is the `supervise` command line: what runs inside
// sandboxes (a Docker sandbox's PID 1, a native sandbox's init, the exec
// stage, the probes), shared by corral and corral-supervise.
package supervisecmd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/corral-sandbox/corral/internal/atomicfile"
	"github.com/corral-sandbox/corral/internal/buildid"
	"github.com/corral-sandbox/corral/internal/driver/native/shim"
	"github.com/corral-sandbox/corral/internal/supervisor"
)

// ExitError ends the program with its code: the supervised command's, or
// 126/127 for a command that cannot run, as a shell's.
type ExitError struct{ Code int }

func (e *ExitError) Error() string { return fmt.Sprintf("exit status %d", e.Code) }

// Main runs corral-supervise's command line, args without the program's
// name (`supervise ...`, as the drivers write it), and returns the exit code.
func Main(args []string) int {
	root := &cobra.Command{Use: "corral-supervise", SilenceErrors: true, SilenceUsage: true,
		// No shell completion for a program people do not type: making
		// its command costs every start inside a sandbox ~16 page faults.
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true}}
	root.AddCommand(New())
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	var exit *ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit):
		return exit.Code
	}
	fmt.Fprintln(os.Stderr, "corral-supervise:", err)
	return 1
}

// New is the supervise command.
func New() *cobra.Command {
	var main supervisor.Config
	cmd := &cobra.Command{
		Use:    "supervise [--ready-file PATH] [--control-socket PATH] [--pids-dir DIR --pids N] [--drop-caps] -- CMD [ARGS...]",
		Short:  "Run as a sandbox's PID 1 (used inside sandboxes, not by people)",
		Hidden: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			main.Command = args
			code, err := supervisor.Run(main)
			if err != nil {
				return err
			}
			return &ExitError{Code: code}
		},
	}
	cmd.Flags().StringVar(&main.ReadyFile, "ready-file", "", "file written once the main process runs")
	cmd.Flags().StringVar(&main.ControlSocket, "control-socket", "", "serve execs on a Unix socket here (the Docker driver's way in)")
	cmd.Flags().StringVar(&main.PidsDir, "pids-dir", "", "mount a pids cgroup here to limit the processes started (gVisor)")
	cmd.Flags().Int64Var(&main.Pids, "pids", 0, "the processes the pids cgroup of --pids-dir allows")
	cmd.Flags().BoolVar(&main.DropCaps, "drop-caps", false, "keep only the capabilities of a native sandbox in the processes started")
	cmd.AddCommand(&cobra.Command{
		Use:   "sandbox BUNDLE",
		Short: "Run as PID 1 of a native sandbox, started by the native driver in new namespaces",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return &ExitError{Code: shim.RunSandbox(args[0])}
		},
	})
	var spareAhead bool
	standbyCmd := &cobra.Command{
		Use:   "standby [--spare-ahead] [-- ROOM]",
		Short: "Wait, in new namespaces, for the native driver to hand over a sandbox, then run as its PID 1",
		Args:  cobra.MaximumNArgs(1), // room in the command line for the sandbox's bundle
		RunE: func(cmd *cobra.Command, args []string) error {
			return &ExitError{Code: shim.RunStandby(spareAhead)}
		},
	}
	standbyCmd.Flags().BoolVar(&spareAhead, "spare-ahead", false, "start the main process's exec stage now, in a user namespace mapped to the sandbox's ids at the handoff")
	cmd.AddCommand(standbyCmd)
	cmd.AddCommand(&cobra.Command{
		Use:   "probe NAME...",
		Short: "Try what a sandbox's policy may forbid (mount, ptrace, bpf, keyctl, unshare) and show no_new_privs, seccomp and uid",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, names []string) error {
			lines, err := supervisor.Probe(names)
			for _, l := range lines {
				fmt.Println(l)
			}
			return err
		},
	})
	var stage supervisor.ExecStage
	execCmd := &cobra.Command{
		Use:   "exec [--wait-fd N] [--report-fd N] [--drop-caps] [--cgroup PROCS] [--spare-fd N [--unmapped]] -- CMD [ARGS...]",
		Short: "Apply the sandbox's protections and exec CMD (with --spare-fd, the CMD it is handed on that socket)",
		RunE: func(cmd *cobra.Command, args []string) error {
			var err error
			if stage.SpareFD > 0 {
				args, err = supervisor.ExecSpare(stage.SpareFD, stage.DropCaps, stage.Unmapped)
			} else {
				err = supervisor.Exec(args, stage)
			}
			if len(args) == 0 {
				args = []string{"(none)"}
			}
			if errors.Is(err, os.ErrNotExist) || isNotFound(err) {
				fmt.Fprintf(os.Stderr, "corral: exec %s: %v\n", args[0], err)
				return &ExitError{Code: 127}
			}
			fmt.Fprintf(os.Stderr, "corral: exec %v: %v\n", args, err)
			return &ExitError{Code: 126}
		},
	}
	execCmd.Flags().IntVar(&stage.WaitFD, "wait-fd", 0, "wait for the end of this descriptor before anything else")
	execCmd.Flags().IntVar(&stage.ReportFD, "report-fd", 0, "write why the command cannot run to this descriptor")
	execCmd.Flags().BoolVar(&stage.DropCaps, "drop-caps", false, "keep only the capabilities of a native sandbox")
	execCmd.Flags().StringVar(&stage.Cgroup, "cgroup", "", "join the cgroup of this cgroup.procs file first")
	execCmd.Flags().IntVar(&stage.SpareFD, "spare-fd", 0, "wait on this socket for the command, its environment and descriptors")
	execCmd.Flags().BoolVar(&stage.Unmapped, "unmapped", false, "with --spare-fd: started in a user namespace whose ids are mapped later; become its root when asked")
	cmd.AddCommand(execCmd)
	cmd.AddCommand(&cobra.Command{
		Use:   "identity",
		Short: "Print this build's identity (the gateway runs corral-supervise only when it is its own)",
		Args:  cobra.NoArgs,
		Run:   func(cmd *cobra.Command, _ []string) { fmt.Println(buildid.Identity()) },
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "connect PORT",
		Short: "Connect to 127.0.0.1:PORT here and pass bytes between it and stdin/stdout (a Kubernetes Pod's port, reached over pods/exec)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			port, err := strconv.Atoi(args[0])
			if err != nil || port < 1 || port > 65535 {
				return fmt.Errorf("port %q: want 1 to 65535", args[0])
			}
			err = supervisor.Connect(port, os.Stdin, os.Stdout)
			if errors.Is(err, supervisor.ErrConnectRefused) {
				fmt.Fprintf(os.Stderr, "corral supervise: connect 127.0.0.1:%d: connection refused\n", port)
				os.Exit(supervisor.ConnectRefused)
			}
			return err
		},
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "install DEST",
		Short: "Copy this program to DEST, read-only (a Kubernetes Pod's init container puts the supervisor in the Pod so)",
		Args:  cobra.ExactArgs(1),
		RunE:  func(cmd *cobra.Command, args []string) error { return installSelf(args[0]) },
	})
	return cmd
}

// installSelf copies the running program to dest (mode 0555), whole or
// not at all.
func installSelf(dest string) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	src, err := os.Open(exe)
	if err != nil {
		return err
	}
	defer src.Close()
	return atomicfile.WriteVolatileFrom(dest, src, 0o555)
}

func isNotFound(err error) bool {
	var e *exec.Error
	return errors.As(err, &e) && errors.Is(e.Err, exec.ErrNotFound)
}
