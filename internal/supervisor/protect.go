package supervisor

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/elastic/go-seccomp-bpf"
	"github.com/landlock-lsm/go-landlock/landlock"
	llsyscall "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/policy"
)

// PolicyEnv is the environment variable that carries a sandbox's policy
// (policy.Policy as JSON) to the exec stage, which removes it before the
// command runs.
const PolicyEnv = "CORRAL_POLICY"

// Workdir is the sandbox's workdir, read-write under include_workdir.
const Workdir = "/sandbox"

// defaultDenied are the system calls the default seccomp filter refuses
// with EPERM: what container runtimes deny by default (mounts, tracing,
// kernel modules and kexec, BPF, keyrings, namespaces, clock and swap
// changes, reboot, raw handles to files).
var defaultDenied = []string{
	"mount", "umount2", "pivot_root", "fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree", "mount_setattr",
	"ptrace", "process_vm_readv", "process_vm_writev", "kcmp",
	"kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
	"bpf", "perf_event_open", "userfaultfd",
	"keyctl", "add_key", "request_key",
	"unshare", "setns",
	"settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
	"swapon", "swapoff", "reboot", "acct", "quotactl", "syslog", "iopl", "ioperm", "uselib",
	"open_by_handle_at", "name_to_handle_at", "lookup_dcookie",
	"io_uring_setup", "io_uring_enter", "io_uring_register",
}

// allowedPersonalities are the personality(2) values the default filter
// lets through, as container runtimes do: Linux, its 32-bit and uname26
// forms, and the query. Anything else (ADDR_NO_RANDOMIZE, READ_IMPLIES_EXEC,
// ...) weakens the process's memory protections and is refused.
var allowedPersonalities = []uint64{0x0, 0x8, 0x20000, 0x20008, 0xffffffff}

// defaultFilter is the default seccomp policy: everything but
// defaultDenied, and personality changes outside allowedPersonalities.
func defaultFilter() seccomp.Policy {
	var persona seccomp.ArgumentConditions
	for _, v := range allowedPersonalities {
		persona = append(persona, seccomp.Condition{Argument: 0, Operation: seccomp.NotEqual, Value: v})
	}
	return seccomp.Policy{DefaultAction: seccomp.ActionAllow, Syscalls: []seccomp.SyscallGroup{{
		Names:              defaultDenied,
		NamesWithCondtions: []seccomp.NameWithConditions{{Name: "personality", Conditions: persona}},
		Action:             seccomp.ActionErrno,
	}}}
}

// PolicyFromEnv returns the policy the gateway passed, and whether there
// was one. A policy that names no run_as_user gets the image's user
// (ImageUserEnv), looked up in the root this runs in.
func PolicyFromEnv() (policy.Policy, bool, error) {
	text, ok := os.LookupEnv(PolicyEnv)
	if !ok {
		return policy.Policy{}, false, nil
	}
	var p policy.Policy
	if err := json.Unmarshal([]byte(text), &p); err != nil {
		return p, true, fmt.Errorf("%s: %w", PolicyEnv, err)
	}
	if user := os.Getenv(ImageUserEnv); user != "" && p.Process.RunAsUser == nil {
		passwd, _ := os.ReadFile("/etc/passwd") // the image's: this runs inside it
		uid, err := ResolveUser(user, passwd)
		if err != nil {
			return p, true, err
		}
		p.Process.RunAsUser = &uid
	}
	return p, true, nil
}

// PolicyJSON is the value of PolicyEnv for a policy.
func PolicyJSON(p policy.Policy) string {
	data, _ := json.Marshal(p) // plain fields always marshal
	return string(data)
}

// protect applies a policy to the calling process, which is about to exec
// its command: Landlock, no_new_privs, the user switch and seccomp, in that
// order. It returns what it applied, for the sandbox's record. With
// landlock compatibility hard_requirement, a kernel without Landlock is an
// error; with best_effort it is reported.
func protect(p policy.Policy) ([]string, error) {
	var applied []string
	noNewPrivs := p.Process.NoNewPrivileges || p.Process.Seccomp != policy.SeccompUnconfined || p.Filesystem.Set
	switch {
	case p.Filesystem.Set:
		what, err := restrictFiles(p)
		if err != nil {
			return nil, err
		}
		applied = append(applied, what)
	case noNewPrivs:
		what, err := landlockDomain()
		if err != nil {
			return nil, err
		}
		if what != "" {
			applied = append(applied, what)
		}
	}
	if noNewPrivs {
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			return nil, fmt.Errorf("no_new_privs: %w", err)
		}
		applied = append(applied, "no_new_privs")
	}
	if p.GVisor() {
		// gVisor's processes are not the host's: the host's pids limit counts
		// gVisor's own threads and kills the whole sandbox at its cap. This
		// one fails a fork cleanly, inside, per user; raising it back needs
		// CAP_SYS_RESOURCE, which no sandbox keeps.
		n := uint64(p.Limits.PidsMax())
		if err := unix.Setrlimit(unix.RLIMIT_NPROC, &unix.Rlimit{Cur: n, Max: n}); err != nil {
			return nil, fmt.Errorf("limits.pids: %w", err)
		}
		applied = append(applied, fmt.Sprintf("pids %d (RLIMIT_NPROC, per user)", n))
	}
	if uid := p.Process.RunAsUser; uid != nil {
		if err := switchUser(*uid); err != nil {
			return nil, err
		}
		applied = append(applied, "user "+strconv.Itoa(*uid))
	}
	if p.Process.Seccomp != policy.SeccompUnconfined {
		if err := loadSeccomp(p.Process.Seccomp); err != nil {
			return nil, err
		}
		applied = append(applied, "seccomp "+p.Process.Seccomp)
	}
	return applied, nil
}

// simulatedLandlockABI, set only in a test build (failures_corraltest.go),
// returns the Landlock ABI of a simulated kernel when a test asks for one
// (testbug.LandlockABIEnv; 0 is a kernel without Landlock).
var simulatedLandlockABI func() (int, bool)

// landlockABI is the kernel's Landlock ABI (0: none).
func landlockABI() int {
	if simulatedLandlockABI != nil {
		if abi, ok := simulatedLandlockABI(); ok {
			return abi
		}
	}
	abi, err := llsyscall.LandlockGetABIVersion()
	if err != nil {
		return 0
	}
	return abi
}

// restrictFiles lets the process read (and execute) only the read_only
// paths, and read and write only the read_write ones and the workdir,
// with the rights of the newest Landlock ABI the kernel has.
func restrictFiles(p policy.Policy) (string, error) {
	abi := landlockABI()
	hard := p.Landlock.Compatibility == policy.HardRequirement
	if abi == 0 {
		if hard {
			return "", errors.New("landlock: the policy requires it (hard_requirement), but this kernel has no Landlock")
		}
		return "landlock unavailable (ABI 0): file lists not enforced", nil
	}
	rw := p.Filesystem.ReadWrite
	if p.Filesystem.IncludeWorkdir {
		rw = append(rw[:len(rw):len(rw)], Workdir)
	}
	roDirs, roFiles := splitDirs(p.Filesystem.ReadOnly)
	rwDirs, rwFiles := splitDirs(rw)
	// The newest ABI this build knows that the kernel has: every right of
	// it is enforced, or the call fails.
	configs := []landlock.Config{landlock.V1, landlock.V2, landlock.V3, landlock.V4, landlock.V5, landlock.V6, landlock.V7}
	used := min(abi, len(configs))
	err := configs[used-1].RestrictPaths(
		landlock.RODirs(roDirs...).IgnoreIfMissing(), landlock.ROFiles(roFiles...).IgnoreIfMissing(),
		landlock.RWDirs(rwDirs...).IgnoreIfMissing(), landlock.RWFiles(rwFiles...).IgnoreIfMissing(),
	)
	if err != nil {
		return "", fmt.Errorf("landlock: %w", err)
	}
	return fmt.Sprintf("landlock ABI %d", used), nil
}

// landlockDomain puts the process in a Landlock domain of its own that
// restricts no file it may reach (only the making of block devices, which
// no sandbox's capabilities allow): a process in a domain cannot ptrace,
// nor open /proc/PID/mem of, a process outside it. So a workload without
// file lists, root or not, cannot reach the memory of its supervisor, of
// an exec stage or spare that has not applied its policy yet, or of
// another exec's command. It says "" where the kernel has no Landlock.
// It needs no_new_privs (which it sets), so it is applied only where the
// policy sets it anyway.
func landlockDomain() (string, error) {
	abi := landlockABI()
	if abi == 0 {
		return "", nil
	}
	cfg, err := landlock.NewConfig(landlock.AccessFSSet(llsyscall.AccessFSMakeBlock))
	if err != nil {
		return "", fmt.Errorf("landlock: %w", err)
	}
	if err := cfg.RestrictPaths(); err != nil {
		return "", fmt.Errorf("landlock: %w", err)
	}
	return fmt.Sprintf("landlock ABI %d (a domain: no file lists, other processes out of reach)", abi), nil
}

// splitDirs sorts paths into directories and the rest (files, devices);
// a path that does not exist goes with the directories, to be ignored.
func splitDirs(paths []string) (dirs, files []string) {
	for _, p := range paths {
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			files = append(files, p)
		} else {
			dirs = append(dirs, p)
		}
	}
	return dirs, files
}

// switchUser makes every thread run as uid (and gid uid), without
// supplementary groups.
func switchUser(uid int) error {
	if err := syscall.Setgroups(nil); err != nil {
		return fmt.Errorf("run_as_user %d: drop groups: %w", uid, err)
	}
	if err := syscall.Setgid(uid); err != nil {
		return fmt.Errorf("run_as_user %d: %w", uid, err)
	}
	if err := syscall.Setuid(uid); err != nil {
		return fmt.Errorf("run_as_user %d: %w", uid, err)
	}
	return nil
}

// seccompProfile is the file format of a seccomp profile given by path:
// a default action and groups of system calls with their action (allow,
// errno, kill_process, kill_thread, trap, log).
type seccompProfile struct {
	DefaultAction string `json:"default_action"`
	Syscalls      []struct {
		Names  []string `json:"names"`
		Action string   `json:"action"`
	} `json:"syscalls"`
}

// loadSeccomp installs the default filter or a profile's, on every thread.
func loadSeccomp(setting string) error {
	pol := defaultFilter()
	if setting != policy.SeccompDefault {
		var err error
		if pol, err = readSeccompProfile(setting); err != nil {
			return err
		}
	}
	filter := seccomp.Filter{NoNewPrivs: true, Flag: seccomp.FilterFlagTSync, Policy: pol}
	if err := seccomp.LoadFilter(filter); err != nil {
		return fmt.Errorf("seccomp %s: %w", setting, err)
	}
	return nil
}

func readSeccompProfile(path string) (seccomp.Policy, error) {
	var pol seccomp.Policy
	data, err := os.ReadFile(path)
	if err != nil {
		return pol, fmt.Errorf("seccomp profile: %w", err)
	}
	var prof seccompProfile
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&prof); err != nil {
		return pol, fmt.Errorf("seccomp profile %s: %w", path, err)
	}
	if err := pol.DefaultAction.Unpack(prof.DefaultAction); err != nil {
		return pol, fmt.Errorf("seccomp profile %s: default_action: %w", path, err)
	}
	for i, g := range prof.Syscalls {
		group := seccomp.SyscallGroup{Names: g.Names}
		if err := group.Action.Unpack(g.Action); err != nil {
			return pol, fmt.Errorf("seccomp profile %s: syscalls[%d].action: %w", path, i, err)
		}
		pol.Syscalls = append(pol.Syscalls, group)
	}
	if err := pol.Validate(); err != nil {
		return pol, fmt.Errorf("seccomp profile %s: %w", path, err)
	}
	return pol, nil
}
