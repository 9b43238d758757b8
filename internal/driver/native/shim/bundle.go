package shim

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/corral-sandbox/corral/internal/atomicfile"
	"github.com/corral-sandbox/corral/internal/policy"
	"github.com/corral-sandbox/corral/internal/supervisor"
)

// Bundle is what the native driver hands a sandbox supervisor: one
// directory per incarnation (sandbox id and generation) holding the
// supervisor's configuration, and the files it leaves for the gateway.
type Bundle struct {
	// Dir is the incarnation's directory on the host.
	Dir string
}

// SandboxConfig is the configuration of one native incarnation, written by
// the gateway to the bundle before the supervisor starts.
type SandboxConfig struct {
	ID         string   `json:"id"`
	Generation int64    `json:"generation"`
	Hostname   string   `json:"hostname"`
	Command    []string `json:"command"`
	Env        []string `json:"env,omitempty"`
	// RootFS is a root filesystem directory, mounted read-only; empty
	// means the host's operating system directories only (HostOSDirs,
	// with /etc's secrets masked).
	RootFS string `json:"rootfs,omitempty"`
	// Layers, when set, are an image's unpacked layers on the host, bottom
	// first: the root is their overlay (idmapped to IDs), not RootFS.
	Layers []string `json:"layers,omitempty"`
	// Dir is the main process's and execs' working directory
	// ("": /sandbox).
	Dir string `json:"dir,omitempty"`
	// Workdir is the host directory mounted read-write at /sandbox.
	Workdir string `json:"workdir"`
	// WorkdirImage, when set, is mounted at /sandbox instead of Workdir:
	// a disk image of the sandbox's own size (limits.disk), whose root
	// is given to WorkdirOwner (a host uid).
	WorkdirImage string `json:"workdir_image,omitempty"`
	WorkdirOwner int    `json:"workdir_owner,omitempty"`
	// Trust, when set, is the host directory of the sandbox's egress
	// certificates, mounted read-only at driver.TrustDir; its bundle also
	// covers driver.SystemBundle where the root has that file.
	Trust string `json:"trust,omitempty"`
	// Hide are host directories covered by an empty read-only directory
	// wherever they appear in the sandbox's root (the gateway's home,
	// with its keys, its store and the other sandboxes).
	Hide []string `json:"hide,omitempty"`
	// IDs, when set, is the host id range of the user namespace every
	// process of the sandbox runs in: uid and gid 0 inside are IDs.Base
	// outside.
	IDs *supervisor.IDRange `json:"ids,omitempty"`
	// Files, when set (on gVisor, which has no Landlock), are the
	// policy's file lists, enforced by the root's mounts instead: the
	// root holds only the listed paths of the source root (read-only),
	// /sandbox only with IncludeWorkdir, /tmp, /proc and /sys only when
	// listed.
	Files *policy.Filesystem `json:"files,omitempty"`
	// Runsc, when set, is the runsc binary the sandbox's processes run
	// under (the gVisor tier); IDs is then unset: gVisor's kernel keeps
	// the sandbox's ids apart from the host's.
	Runsc string `json:"runsc,omitempty"`
	// Checkpointable, with Runsc, runs gVisor on its own network stack
	// (loopback only), which runsc can checkpoint (OpCheckpoint) and
	// restore (an image in the bundle's RestoreDir).
	Checkpointable bool `json:"checkpointable,omitempty"`
	// LogMaxBytes caps what is kept of the main process's output, both
	// streams together.
	LogMaxBytes int64 `json:"log_max_bytes"`
	// Socket is the control socket's path on the host.
	Socket string `json:"socket"`
	// Cgroup names the sandbox's cgroup; Limits are applied to it.
	Cgroup string        `json:"cgroup"`
	Limits policy.Limits `json:"limits"`
}

// Exit is what a supervisor records when its main process has ended.
type Exit struct {
	Code int `json:"code"`
	// Stopped is set when the main process ended because of a stop
	// request rather than on its own.
	Stopped bool `json:"stopped,omitempty"`
}

// The files of a bundle.
const (
	ConfigFile = "config.json"
	LockFile   = "lock" // locked by the supervisor while it lives
	PIDFile    = "pid"  // the supervisor's pid on the host, written at start
	ExitFile   = "exit" // an Exit, written before the supervisor exits
	// PausedFile marks, while the supervisor lives, an incarnation whose
	// processes a pause checkpointed out (their memory freed) until their
	// restore.
	PausedFile     = "paused"
	StdoutFile     = "stdout" // the main process's output
	StderrFile     = "stderr" // its error output
	SupervisorLog  = "supervisor.log"
	ConfigFileMode = 0o600
)

// Path returns the path of a bundle file.
func (b Bundle) Path(name string) string { return filepath.Join(b.Dir, name) }

// WriteConfig stores cfg in the bundle, for the supervisor about to start
// on it. Not synced: only that supervisor reads it, which a crash of the
// machine ends too, and every start writes it again.
func (b Bundle) WriteConfig(cfg SandboxConfig) error {
	data, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	return atomicfile.WriteVolatile(b.Path(ConfigFile), data, ConfigFileMode)
}

// ReadConfig loads the bundle's configuration.
func (b Bundle) ReadConfig() (SandboxConfig, error) {
	var cfg SandboxConfig
	data, err := os.ReadFile(b.Path(ConfigFile))
	if err != nil {
		return cfg, err
	}
	if err := json.Unmarshal(data, &cfg); err != nil {
		return cfg, fmt.Errorf("%s: %w", b.Path(ConfigFile), err)
	}
	return cfg, nil
}

// ReadExit returns the recorded exit, or an error wrapping os.ErrNotExist
// when the supervisor recorded none.
func (b Bundle) ReadExit() (Exit, error) {
	var e Exit
	data, err := os.ReadFile(b.Path(ExitFile))
	if err != nil {
		return e, err
	}
	if err := json.Unmarshal(data, &e); err != nil {
		return e, fmt.Errorf("%s: %w", b.Path(ExitFile), err)
	}
	return e, nil
}
