package shim

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/atomicfile"
	"github.com/corral-sandbox/corral/internal/control"
	"github.com/corral-sandbox/corral/internal/policy"
	"github.com/corral-sandbox/corral/internal/supervisor"
)

// The gVisor tier: the supervisor stays on the host, in the sandbox's
// namespaces and cgroups, builds the same root file system, and runs the
// sandbox's processes under runsc instead of on the host's kernel. The
// main process is the init of a runsc container whose OCI bundle the
// supervisor writes (`corral supervise` inside it, PID 1 of gVisor's
// kernel, starts the command through the exec stage); an exec is a
// `runsc exec` of the exec stage. runsc uses the host's network stack
// (--network=host) in the supervisor's loopback-only network namespace, so
// the egress proxy and forwarded ports are reached at 127.0.0.1 as on the
// namespaces tier.

// The sandbox's paths of the gVisor tier.
const (
	// gvisorBin is where the corral binary is mounted, read-only.
	gvisorBin = "/.corral/bin/corral"
	// gvisorRun is where the init reports (gvisorReady, and the
	// supervisor's ProtectionsFile or FailedFile), a directory of the
	// bundle.
	gvisorRun = "/.corral/run"
	// gvisorReady is the init's ready file in gvisorRun.
	gvisorReady = "ready"
	// gvisorPids is the mount point of gVisor's pids cgroup, which the
	// init mounts and limits before the command runs, and execs join.
	gvisorPids = "/.corral/pids"
)

// GVisorDir is the bundle's directory for runsc: the OCI bundle
// (oci/config.json and the execs' process files), runsc's state and log,
// and the run directory.
const GVisorDir = "gvisor"

// runscLog is runsc's own log in GVisorDir.
const runscLog = "runsc.log"

// The host's pids limit of a gVisor sandbox is hostPidsPerTask times the
// sandbox's, and hostPidsBase more: runsc's own processes and threads count
// there, and on the ptrace platform every task of gVisor's costs the host
// about 7.5 (75 idle, 835 with 100 sleeps, measured), while the sandbox's
// tasks are limited inside gVisor. A host limit hit first kills the
// sentry or the gofer ("newosproc"), the whole sandbox with them.
const (
	hostPidsPerTask = 8
	hostPidsBase    = 512
)

// taskLimit is the limit on a gVisor sandbox's tasks: limits.pids, or
// without it policy.DefaultPids/hostPidsPerTask, so that a default
// sandbox costs the host no more pids than one on the namespaces tier.
func taskLimit(l policy.Limits) int64 {
	if l.Pids > 0 {
		return l.Pids
	}
	return policy.DefaultPids / hostPidsPerTask
}

// gvisor runs one incarnation's processes under runsc.
type gvisor struct {
	runsc string // the runsc binary on the host
	// network is runsc's: host, the host's stack in the sandbox's
	// namespace, or none, gVisor's own (loopback only), which a memory
	// checkpoint needs.
	network string
	dir     string // the bundle's GVisorDir
	id      string // the runsc container's id
	execs   atomic.Int64
}

func newGVisor(cfg SandboxConfig, bundle string) *gvisor {
	network := "host"
	if cfg.Checkpointable {
		network = "none"
	}
	return &gvisor{runsc: cfg.Runsc, network: network, dir: filepath.Join(bundle, GVisorDir), id: "corral-" + cfg.ID}
}

// command is runsc's command line for a subcommand.
func (g *gvisor) command(sub ...string) []string {
	argv := []string{g.runsc, "--root", filepath.Join(g.dir, "state"), "--log", filepath.Join(g.dir, runscLog),
		"--network=" + g.network, "--ignore-cgroups"}
	return append(argv, sub...)
}

// hostEnv is runsc's own environment: nothing of the sandbox's.
var hostEnv = []string{DefaultPath}

// The parts of an OCI runtime configuration that corral writes.
type (
	ociSpec struct {
		Version  string     `json:"ociVersion"`
		Process  ociProcess `json:"process"`
		Root     ociRoot    `json:"root"`
		Hostname string     `json:"hostname,omitempty"`
		Mounts   []ociMount `json:"mounts"`
	}
	ociProcess struct {
		Terminal     bool            `json:"terminal,omitempty"`
		User         ociUser         `json:"user"`
		Args         []string        `json:"args"`
		Env          []string        `json:"env"`
		Cwd          string          `json:"cwd"`
		Capabilities ociCapabilities `json:"capabilities"`
	}
	ociUser struct {
		UID uint32 `json:"uid"`
		GID uint32 `json:"gid"`
	}
	ociCapabilities struct {
		Bounding  []string `json:"bounding"`
		Effective []string `json:"effective"`
		Permitted []string `json:"permitted"`
	}
	ociRoot struct {
		Path     string `json:"path"`
		Readonly bool   `json:"readonly"`
	}
	ociMount struct {
		Destination string   `json:"destination"`
		Type        string   `json:"type"`
		Source      string   `json:"source"`
		Options     []string `json:"options,omitempty"`
	}
)

// process is the OCI process of a command run through corral in the
// sandbox, as root of gVisor's kernel with the native sandbox's
// capabilities (and CAP_SYS_ADMIN for the init, which mounts the pids
// cgroup): the exec stage takes it from there.
func (g *gvisor) process(cfg SandboxConfig, args, env []string, tty, init bool) ociProcess {
	caps := supervisor.KeptCapabilityNames()
	if init {
		caps = append(caps, "CAP_SYS_ADMIN")
	}
	return ociProcess{
		Terminal: tty, Args: args, Env: env, Cwd: cmp.Or(cfg.Dir, "/sandbox"),
		Capabilities: ociCapabilities{Bounding: caps, Effective: caps, Permitted: caps},
	}
}

// writeSpec writes the OCI bundle of the main process: the root file
// system the supervisor built at root (read-only), gVisor's own /proc,
// /dev and /sys, and the writable /tmp and /sandbox, the corral binary
// and the run directory bound in.
func (g *gvisor) writeSpec(cfg SandboxConfig, root string) error {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return err
	}
	run := filepath.Join(g.dir, "run")
	if err := os.MkdirAll(filepath.Join(g.dir, "oci"), 0o700); err != nil {
		return err
	}
	// Small and of memory: what the sandbox writes there (its init is
	// root) takes nothing of the host's disk.
	if err := mkdirMount("tmpfs", run, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=64k,mode=755"); err != nil {
		return err
	}
	init := supervisor.GVisorInitArgv(gvisorBin, gvisorRun+"/"+gvisorReady, gvisorPids, taskLimit(cfg.Limits))
	spec := ociSpec{
		Version:  "1.0.2",
		Process:  g.process(cfg, append(init, cfg.Command...), cfg.Env, false, true),
		Root:     ociRoot{Path: root, Readonly: true},
		Hostname: cfg.Hostname,
		Mounts: []ociMount{
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs"},
			{Destination: "/dev/pts", Type: "devpts", Source: "devpts"},
			{Destination: "/dev/shm", Type: "tmpfs", Source: "shm"},
			bind(exe, gvisorBin, "ro"),
			bind(run, gvisorRun, "rw"),
		},
	}
	for _, m := range []ociMount{
		{Destination: "/proc", Type: "proc", Source: "proc"},
		{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"ro"}},
		bind(filepath.Join(root, "tmp"), "/tmp", "rw"),
		bind(filepath.Join(root, "sandbox"), "/sandbox", "rw"),
	} {
		if cfg.Files != nil {
			switch listed(cfg.Files, m.Destination) {
			case notListed:
				// runsc mounts its /proc and /sys where the bundle does
				// not: an empty directory instead.
				m = ociMount{Destination: m.Destination, Type: "tmpfs", Source: "none", Options: []string{"ro", "size=0"}}
			case listedReadOnly:
				m.Options = []string{"rbind", "ro"}
			}
		}
		spec.Mounts = append(spec.Mounts, m)
	}
	return writeJSON(filepath.Join(g.dir, "oci", "config.json"), spec)
}

// How the file lists name a directory.
const (
	notListed = iota
	listedReadOnly
	listedReadWrite
)

// listed says how the file lists name dir (or a path in it; the
// workdir, /sandbox, with IncludeWorkdir): not, read-only or read-write.
func listed(files *policy.Filesystem, dir string) int {
	within := func(paths []string) bool {
		return slices.ContainsFunc(paths, func(p string) bool { _, ok := Within(dir, p); return ok })
	}
	switch {
	case within(files.ReadWrite) || (dir == supervisor.Workdir && files.IncludeWorkdir):
		return listedReadWrite
	case within(files.ReadOnly):
		return listedReadOnly
	}
	return notListed
}

func bind(source, destination, mode string) ociMount {
	return ociMount{Destination: destination, Type: "bind", Source: source, Options: []string{"rbind", mode}}
}

func writeJSON(path string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return atomicfile.Write(path, data, 0o600)
}

// gvisorMountPoints makes, in the root being built, what the OCI bundle
// mounts onto: gVisor mounts nothing on a path its root lacks.
func gvisorMountPoints(newRoot string) error {
	for _, dir := range []string{"proc", "dev", "sys", "tmp", "sandbox", gvisorRun, gvisorPids, filepath.Dir(gvisorBin)} {
		if err := os.MkdirAll(filepath.Join(newRoot, dir), 0o755); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(newRoot, gvisorBin), nil, 0o755)
}

// reportWait bounds how long the init takes to start the main command.
const reportWait = time.Minute

// awaitInit waits for the report of the container's init: what it applied
// once the main command runs, or why the command cannot run. done is the
// runsc process's end.
func (g *gvisor) awaitInit(children *supervisor.Children, done <-chan int) (string, error) {
	run := filepath.Join(g.dir, "run")
	for deadline := time.Now().Add(reportWait); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(run, gvisorReady)); err == nil {
			applied, err := os.ReadFile(filepath.Join(run, supervisor.ProtectionsFile))
			return string(applied), err
		}
		if reason, err := os.ReadFile(filepath.Join(run, supervisor.FailedFile)); err == nil {
			return "", commandError{errors.New(string(reason))}
		}
		children.Reap() // the run loop, which reaps, has not started yet
		select {
		case code := <-done:
			return "", fmt.Errorf("runsc exited with %d before the main process ran%s", code, LastLine(filepath.Join(g.dir, runscLog)))
		default:
		}
	}
	return "", fmt.Errorf("gVisor's init did not start the main process within %v", reportWait)
}

// startExec starts an exec's command as a `runsc exec` of the exec stage
// in the container, on the caller's files or on a terminal of the
// sandbox, which runsc hands to gVisor's kernel as the process's
// terminal.
func (g *gvisor) startExec(s *sandboxSupervisor, req control.Request, env []string, stdio []*os.File) (int, <-chan int, func(), error) {
	n := strconv.FormatInt(g.execs.Add(1), 10)
	process, pidFile := filepath.Join(g.dir, "oci", "exec-"+n+".json"), filepath.Join(g.dir, "oci", "exec-"+n+".pid")
	args := supervisor.ExecArgv(gvisorBin, supervisor.ExecStage{Cgroup: path.Join(gvisorPids, supervisor.PidsGroup, "cgroup.procs")}, req.Command)
	if err := writeJSON(process, g.process(s.cfg, args, env, req.TTY, false)); err != nil {
		return 0, nil, nil, err
	}
	argv := g.command("exec", "--process", process, "--internal-pid-file", pidFile, g.id)
	pid, done, _, failed, err := s.children.Start(argv, hostEnv, stdio, req.TTY)
	if err == nil && failed != nil {
		err = failed
	}
	if err != nil {
		os.Remove(process)
		return 0, nil, nil, fmt.Errorf("runsc exec: %w", err)
	}
	ended := make(chan int, 1)
	go func() {
		code := <-done
		os.Remove(process)
		os.Remove(pidFile)
		ended <- code
	}()
	kill := func() {
		if data, err := os.ReadFile(pidFile); err == nil { // the process in gVisor, which runsc's end leaves running
			g.run(s, "kill", "--pid", strings.TrimSpace(string(data)), g.id, "KILL")
		}
		_ = unix.Kill(-pid, unix.SIGKILL)
	}
	return pid, ended, kill, nil
}

// run starts a runsc subcommand on the container and leaves it to the
// reaper.
func (g *gvisor) run(s *sandboxSupervisor, sub ...string) {
	_, _, _, _, _ = s.children.Start(g.command(sub...), hostEnv, []*os.File{os.Stdin, os.Stderr, os.Stderr}, false)
}

// protections is what the gVisor tier adds to the protections the init
// reports: what enforces the sandbox instead of the host's kernel.
func (g *gvisor) protections() string {
	network := "the host's stack in the sandbox's loopback-only network namespace"
	if g.network == "none" {
		network = "gVisor's own stack, loopback only (memory snapshots): no egress, no ports reached from outside"
	}
	return "gVisor (runsc, ptrace platform): the sandbox's system calls go to gVisor's kernel, not the host's; " +
		"network: " + network + "; pids: gVisor's pids cgroup; uids: gVisor's, files in /sandbox get them as host ids"
}

// FileListMounts is what enforces a policy's file lists on gVisor, which
// has no Landlock.
const FileListMounts = "file lists: by mounts (gVisor has no Landlock): only the listed paths exist, read-only; " +
	"/tmp and /sandbox (the workdir) whole, as listed; /proc and /sys only where listed; gVisor's own /dev always"
