// Package supervisor is what every driver's supervisor shares: the exec
// stage (`corral supervise exec`: Landlock, seccomp, no_new_privs,
// capabilities and the user switch, applied just before a command runs),
// Children (processes started through it), the reports a supervisor leaves
// for the gateway and how the gateway reads them, the probes, and the
// Docker driver's PID 1 (`corral supervise`, Run): it starts the main
// process, reports readiness, forwards signals, reaps every zombie and
// exits with the main process's status. The native driver's own
// supervisor is internal/driver/native/shim.
package supervisor

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/atomicfile"
	"github.com/corral-sandbox/corral/internal/cgroups"
	"github.com/corral-sandbox/corral/internal/control"
	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/files"
	"github.com/corral-sandbox/corral/internal/policy"
)

// Config is what a supervisor runs.
type Config struct {
	// Command is the main process and its arguments.
	Command []string
	// ReadyFile, when set, is written (atomically, with the main process's
	// pid) once the main process runs.
	ReadyFile string
	// PidsDir and Pids, when set, limit the processes it starts to Pids
	// through a pids cgroup of the kernel it runs on, mounted at PidsDir
	// (gVisor's: the host's pids limit counts gVisor's own threads too).
	PidsDir string
	Pids    int64
	// DropCaps keeps only the capabilities of a native sandbox in the
	// processes it starts.
	DropCaps bool
	// ControlSocket, when set, is where it serves execs (control.OpExec,
	// only its owner, root, may connect): each through a spare exec stage
	// (spare.go) started ahead, without the engine's exec path.
	ControlSocket string
}

// forwarded are the signals passed on to the main process.
var forwarded = []os.Signal{
	syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT,
	syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH,
}

// Run supervises the main process and returns its exit status (128+N when
// signal N killed it). It returns an error only when the main process could
// not be started.
func Run(cfg Config) (int, error) {
	if len(cfg.Command) == 0 {
		return 0, errors.New("supervise: no command to run")
	}
	// Not dumpable, before any process of the sandbox exists: none, root
	// there included, may open /proc/1/mem and run code as PID 1, outside
	// the policy (the exec stages it starts are dumpable again, and each
	// workload is kept out of them by its Landlock domain, see protect).
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return 0, fmt.Errorf("supervise: %w", err)
	}
	// Signals first, so none is lost between the start and the wait.
	sigs := make(chan os.Signal, 32)
	signal.Notify(sigs, append(forwarded, syscall.SIGCHLD)...)
	defer signal.Stop(sigs)
	if os.Getpid() != 1 {
		// Outside a PID namespace, orphans of the sandbox still come to us.
		_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	}

	if pol, ok, err := PolicyFromEnv(); err == nil && ok && pol.Process.RunAsUser != nil {
		// The workdir volume is root's (and what a snapshot put in it),
		// and the engine gives the private /tmp the image's mode: the
		// user must write to both.
		_ = GiveTree(Workdir, *pol.Process.RunAsUser, *pol.Process.RunAsUser)
		_ = os.Chmod("/tmp", 0o777|os.ModeSticky)
	}
	c := Children{DropCaps: cfg.DropCaps}
	if pids, err := cgroups.OpenPids(""); err == nil { // the container's own, which it sees as its root
		defer pids.Close()
		c.Pids = pids
	}
	if filepath.IsAbs(os.Args[0]) {
		// By the path it was started with: a gVisor sandbox whose file
		// lists leave out /proc has no /proc/self/exe.
		c.Bin = os.Args[0]
	}
	if cfg.PidsDir != "" {
		procs, err := limitPids(cfg.PidsDir, cfg.Pids)
		if err != nil {
			return 0, fmt.Errorf("supervise: %w", err)
		}
		defer procs.Close()
		c.Procs = procs
	}
	if cfg.ControlSocket != "" {
		// Before the main process, so that it runs by the time readiness
		// is reported. Without it, the gateway uses the engine's exec.
		ln, err := control.Listen(cfg.ControlSocket)
		if err != nil {
			fmt.Fprintf(os.Stderr, "corral supervise: %v; execs go through the engine\n", err)
		} else {
			defer ln.Close()
			c.Spare = true
			go serveExecs(ln, &c)
		}
	}
	AwaitEgress(os.Environ())
	main, done, applied, failed, err := c.Start(cfg.Command, os.Environ(), []*os.File{os.Stdin, os.Stdout, os.Stderr}, false)
	if err != nil {
		return 0, fmt.Errorf("supervise: start %s: %w", cfg.Command[0], err)
	}
	// A command that cannot run exits 126 or 127, like a shell's; the
	// gateway learns why from FailedFile instead of readiness.
	if dir := filepath.Dir(cfg.ReadyFile); cfg.ReadyFile != "" {
		file, data := cfg.ReadyFile, []byte(strconv.Itoa(main)+"\n")
		if failed != nil {
			file, data = filepath.Join(dir, FailedFile), []byte(failed.Error())
		} else {
			_ = atomicfile.Write(filepath.Join(dir, ProtectionsFile), []byte(applied), 0o644)
		}
		if err := atomicfile.Write(file, data, 0o644); err != nil {
			fmt.Fprintf(os.Stderr, "corral supervise: report readiness: %v\n", err)
		}
	}
	for {
		select {
		case status := <-done:
			return status, nil
		case sig := <-sigs:
			if sig == syscall.SIGCHLD {
				c.Reap()
				continue
			}
			_ = syscall.Kill(main, sig.(syscall.Signal))
		}
	}
}

// serveExecs answers exec requests on ln with commands started by c, in
// the supervisor's environment (the container's, the policy's included).
func serveExecs(ln *net.UnixListener, c *Children) {
	for {
		conn, err := ln.AcceptUnix()
		if err != nil {
			return
		}
		go func() {
			defer conn.Close()
			req, files, err := control.ReadRequest(conn)
			if err != nil {
				return
			}
			if req.Op != control.OpExec || len(req.Env) > 0 {
				// The gateway asks for execs alone, in the container's
				// environment: whatever else comes is not its.
				control.CloseFiles(files)
				_ = control.WriteReply(conn, control.Reply{Error: fmt.Sprintf("unknown request %q, or with an environment", req.Op)})
				return
			}
			control.ServeExec(conn, req, files, c.ExecStarter(os.Environ()))
		}()
	}
}

// Exec is the exec stage: it runs in the process that becomes the main
// process (or an exec'd one), applies the sandbox's protections to itself
// and replaces itself with the command. With stage.WaitFD > 0 it first
// waits for the end of that descriptor (its supervisor's go-ahead). With
// stage.Cgroup it then joins that group (its cgroup.procs file). With
// stage.ReportFD > 0 it writes there "applied: " and what it applied, or
// "error: " and why it failed; the descriptor closes on a successful exec.
// With stage.DropCaps it keeps only keptCapabilities; the policy comes
// from PolicyEnv. It returns only on failure.
func Exec(command []string, stage ExecStage) error {
	var report *os.File
	if stage.ReportFD > 0 {
		unix.CloseOnExec(stage.ReportFD)
		report = os.NewFile(uintptr(stage.ReportFD), "report")
	}
	if stage.WaitFD > 0 {
		gate := os.NewFile(uintptr(stage.WaitFD), "gate")
		_, _ = io.Copy(io.Discard, gate)
		gate.Close()
	}
	if stage.Cgroup != "" {
		if err := os.WriteFile(stage.Cgroup, []byte(strconv.Itoa(os.Getpid())), 0); err != nil {
			err = fmt.Errorf("join the sandbox's cgroup: %w", err)
			if report != nil {
				fmt.Fprintf(report, "error: %v\n", err)
			}
			return err
		}
	}
	return runStage(command, report, stage.DropCaps)
}

// runStage is the exec stage once its process is where the command is to
// run, with its descriptors and environment: Exec's, or a spare's.
func runStage(command []string, report *os.File, dropCaps bool) (err error) {
	if report != nil {
		defer func() { fmt.Fprintf(report, "error: %v\n", err) }()
	}
	if len(command) == 0 {
		return errors.New("no command to run")
	}
	pol, hasPolicy, err := PolicyFromEnv()
	if err != nil {
		return err
	}
	os.Unsetenv(PolicyEnv)
	if command[0] == files.Command {
		return runFiles(command[1:], pol, hasPolicy, dropCaps, report)
	}
	path, err := exec.LookPath(command[0])
	if err != nil {
		return err
	}
	if err := applyStage(pol, hasPolicy, dropCaps, report); err != nil {
		return err
	}
	return syscall.Exec(path, command, os.Environ())
}

// applyStage applies what the exec stage applies before its command runs
// (the capabilities, then the policy) and says so on report, if any.
func applyStage(pol policy.Policy, hasPolicy, dropCaps bool, report *os.File) error {
	if dropCaps {
		if err := dropCapabilities(); err != nil {
			return err
		}
	}
	var applied []string
	if hasPolicy {
		var err error
		if applied, err = protect(pol); err != nil {
			return err
		}
	}
	if report != nil {
		fmt.Fprintf(report, "applied: %s\n", strings.Join(applied, "; "))
	}
	return nil
}

// egressWait bounds how long a main process waits for its egress proxy.
const egressWait = 10 * time.Second

// AwaitEgress returns once the egress proxy named in env
// (driver.EgressProxyEnv) accepts a connection, so that the main process's
// first request finds it, or after egressWait: without the proxy a sandbox
// has no way out at all, so running on is safe.
func AwaitEgress(env []string) {
	var addr string
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, driver.EgressProxyEnv+"="); ok {
			addr = v
		}
	}
	if addr == "" {
		return
	}
	for deadline := time.Now().Add(egressWait); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return
		}
	}
	fmt.Fprintf(os.Stderr, "corral supervise: the egress proxy at %s does not answer; the main process starts without it\n", addr)
}
