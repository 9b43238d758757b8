package supervisor

import (
	"strconv"
	"strings"
)

// The command lines of `corral supervise` are built here and nowhere else;
// internal/cli parses them (its test runs each through the command tree).

// MainArgv is the entrypoint of a Docker sandbox: bin as PID 1, writing
// readyFile once the main process (the arguments after it) runs, and
// serving execs on controlSocket when it is set.
func MainArgv(bin, readyFile, controlSocket string) []string {
	argv := []string{bin, "supervise", "--ready-file", readyFile}
	if controlSocket != "" {
		argv = append(argv, "--control-socket", controlSocket)
	}
	return append(argv, "--")
}

// GVisorInitArgv is the init of a native sandbox on gVisor: MainArgv,
// with the processes it starts limited to pids by a pids cgroup of
// gVisor's kernel mounted at pidsDir, and only the capabilities of a native
// sandbox.
func GVisorInitArgv(bin, readyFile, pidsDir string, pids int64) []string {
	argv := MainArgv(bin, readyFile, "")
	return append(argv[:len(argv)-1], "--pids-dir", pidsDir, "--pids", strconv.FormatInt(pids, 10), "--drop-caps", "--")
}

// ExecStage is how a command is started through the exec stage.
type ExecStage struct {
	// WaitFD, when > 0, is a descriptor whose end the stage waits for.
	WaitFD int
	// ReportFD, when > 0, is where the stage says what it applied.
	ReportFD int
	// DropCaps keeps only the capabilities of a native sandbox.
	DropCaps bool
	// Cgroup, when set, is the cgroup.procs file of a group the stage
	// joins first (gVisor's pids cgroup, for an exec).
	Cgroup string
	// SpareFD, when > 0, makes the stage a spare waiting on that socket
	// for its command (ExecSpare); it is then started without one.
	SpareFD int
	// Unmapped marks a spare started ahead of its user namespace's ids
	// (Children.StartSpareAhead).
	Unmapped bool
}

// ExecArgv runs command through bin's exec stage.
func ExecArgv(bin string, stage ExecStage, command []string) []string {
	argv := []string{bin, "supervise", "exec"}
	if stage.WaitFD > 0 {
		argv = append(argv, "--wait-fd", strconv.Itoa(stage.WaitFD))
	}
	if stage.ReportFD > 0 {
		argv = append(argv, "--report-fd", strconv.Itoa(stage.ReportFD))
	}
	if stage.DropCaps {
		argv = append(argv, "--drop-caps")
	}
	if stage.Cgroup != "" {
		argv = append(argv, "--cgroup", stage.Cgroup)
	}
	if stage.SpareFD > 0 {
		argv = append(argv, "--spare-fd", strconv.Itoa(stage.SpareFD))
	}
	if stage.Unmapped {
		argv = append(argv, "--unmapped")
	}
	return append(append(argv, "--"), command...)
}

// SandboxArgv is a native sandbox's supervisor on its bundle; its first
// word names it in ps.
func SandboxArgv(bundle string) []string {
	return []string{"corral-supervise", "supervise", "sandbox", bundle}
}

// StandbyArgv is a native supervisor started ahead of its sandbox
// (shim.RunStandby); its first word names it in ps. Its last argument is
// room for the bundle's path in the SandboxArgv it shows once it is handed
// its sandbox. spareAhead starts the main process's exec stage ahead too
// (shim.RunStandby).
func StandbyArgv(spareAhead bool) []string {
	argv := []string{"corral-supervise", "supervise", "standby"}
	if spareAhead {
		argv = append(argv, "--spare-ahead")
	}
	return append(argv, "--", strings.Repeat(".", standbyRoom))
}

// standbyRoom is what StandbyArgv leaves for a bundle's path.
const standbyRoom = 240

// ProbeArgv runs bin's probes.
func ProbeArgv(bin string, probes ...string) []string {
	return append([]string{bin, "supervise", "probe"}, probes...)
}

// InstallArgv copies bin to dest (a Kubernetes Pod's init container, from
// the supervisor image into the Pod).
func InstallArgv(bin, dest string) []string {
	return []string{bin, "supervise", "install", dest}
}

// ConnectArgv connects to 127.0.0.1:port in bin's network namespace and
// passes bytes between it and the standard streams (a Kubernetes
// driver's way into a sandbox's port, over pods/exec): see Connect.
func ConnectArgv(bin string, port int) []string {
	return []string{bin, "supervise", "connect", strconv.Itoa(port)}
}
