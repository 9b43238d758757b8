package supervisecmd

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/corral-sandbox/corral/internal/supervisor"
)

// Every `corral supervise` command line the drivers build names a command
// and flags this CLI has, and leaves the sandbox's command as its
// arguments.
func TestSuperviseCommandLinesParse(t *testing.T) {
	command := []string{"sh", "-c", "echo --not-a-flag"}
	for _, tc := range []struct {
		argv []string
		use  string
		args []string
	}{
		{append(supervisor.MainArgv("/c", "/r/ready", ""), command...), "supervise", command},
		{append(supervisor.MainArgv("/c", "/r/ready", "/r/control.sock"), command...), "supervise", command},
		{append(supervisor.GVisorInitArgv("/c", "/r/ready", "/p", 32), command...), "supervise", command},
		{supervisor.ExecArgv("/c", supervisor.ExecStage{}, command), "exec", command},
		{supervisor.ExecArgv("/c", supervisor.ExecStage{WaitFD: 3, ReportFD: 4, DropCaps: true, Cgroup: "/g/cgroup.procs"}, command), "exec", command},
		{supervisor.ExecArgv("/c", supervisor.ExecStage{SpareFD: 3, DropCaps: true, Unmapped: true}, nil), "exec", nil},
		{supervisor.SandboxArgv("/bundle"), "sandbox", []string{"/bundle"}},
		{supervisor.StandbyArgv(false), "standby", supervisor.StandbyArgv(false)[4:]},
		{supervisor.StandbyArgv(true), "standby", supervisor.StandbyArgv(true)[5:]},
		{supervisor.ProbeArgv("/c", "mount", "uid"), "probe", []string{"mount", "uid"}},
		{supervisor.InstallArgv("/c", "/bin/c"), "install", []string{"/bin/c"}},
		{supervisor.ConnectArgv("/c", 7070), "connect", []string{"7070"}},
	} {
		root := &cobra.Command{Use: "corral-supervise"}
		root.AddCommand(New())
		cmd, rest, err := root.Find(tc.argv[1:])
		if err == nil {
			err = cmd.ParseFlags(rest)
		}
		if err != nil || !strings.HasPrefix(cmd.Use, tc.use) || !slices.Equal(cmd.Flags().Args(), tc.args) {
			t.Errorf("%q: command %q, args %q, %v; want %s with args %q", tc.argv, cmd.Use, cmd.Flags().Args(), err, tc.use, tc.args)
		}
	}
}

// install copies the running program whole, read-only, and leaves no
// temporary file beside it.
func TestInstallCopiesThisProgram(t *testing.T) {
	dir := t.TempDir()
	dest := filepath.Join(dir, "corral-supervise")
	if err := installSelf(dest); err != nil {
		t.Fatal(err)
	}
	exe, _ := os.Executable()
	want, _ := os.ReadFile(exe)
	got, err := os.ReadFile(dest)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("installed %d bytes (%v), want the %d of %s", len(got), err, len(want), exe)
	}
	if fi, _ := os.Stat(dest); fi.Mode().Perm() != 0o555 {
		t.Errorf("mode %v, want 0555", fi.Mode().Perm())
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("%d entries in the directory, want only the program", len(entries))
	}
}
