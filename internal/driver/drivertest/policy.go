package drivertest

import (
	"fmt"
	"strings"
	"testing"

	"github.com/corral-sandbox/corral/internal/policy"
	"github.com/corral-sandbox/corral/internal/supervisor"
)

// PolicySandbox is a running sandbox made with Policy(probeDir), in which
// RunPolicyCases runs its cases.
type PolicySandbox struct {
	// Exec runs a command in the sandbox and returns its exit code and
	// output.
	Exec func(t *testing.T, command ...string) (code int, stdout, stderr string)
	// Probe is the path, inside the sandbox, of a corral binary in
	// probeDir (`corral supervise probe`).
	Probe string
	// Outside is the path, inside the sandbox, of an executable that no
	// list of the policy covers.
	Outside string
	// Protections returns what the driver reports of the policy.
	Protections func(t *testing.T) string
	// FileListsUnenforced is set where nothing enforces the file lists
	// (the Docker driver's gVisor tier: gVisor's kernel has no Landlock,
	// and the engine's mounts are the image's): a case of a path outside
	// every list then has the outcome Unenforced gives it, and the
	// protections say Landlock is unavailable. Such a sandbox is made
	// with GVisorPolicy.
	FileListsUnenforced bool
	// FileListsByMounts is set where the sandbox's mounts enforce the
	// file lists instead of Landlock (the native driver's gVisor tier:
	// gVisor's kernel has no Landlock). A path outside every list is then
	// absent rather than refused, and the protections say "file lists:
	// by mounts" instead of naming a Landlock ABI. Such a sandbox is made
	// with GVisorPolicy.
	FileListsByMounts bool
	// MemoryEndsSandbox is set where the memory limit is the whole
	// sandbox's, its kernel's included (gVisor's, whose own memory cgroup
	// does not enforce): an allocation past it ends the sandbox, not the
	// process, so the allocation case is left to a sandbox of the
	// driver's own test.
	MemoryEndsSandbox bool
}

// PolicyUser is the run_as_user of Policy.
const PolicyUser = 1000

// Policy is the policy RunPolicyCases expects: the system's directories
// and probeDir read-only, /tmp and /dev/null read-write, the workdir,
// Landlock required, user PolicyUser, the default seccomp filter, 64 MiB
// and 32 processes.
func Policy(probeDir string) string {
	return fmt.Sprintf(`version: 1
filesystem_policy:
  include_workdir: true
  read_only: [/bin, /sbin, /usr, /lib, /lib64, /etc, /dev/zero, %s]
  read_write: [/tmp, /dev/null]
landlock:
  compatibility: hard_requirement
process:
  run_as_user: %d
  no_new_privileges: true
  seccomp: default
limits: {memory: 64Mi, pids: 32}
`, probeDir, PolicyUser)
}

// GVisorPolicy is Policy on the gVisor tier. gVisor has no Landlock, so
// Landlock is best_effort: hard_requirement is refused there.
func GVisorPolicy(probeDir string) string {
	p := strings.Replace(Policy(probeDir), "compatibility: hard_requirement", "compatibility: best_effort", 1)
	return p + "isolation: gvisor\n"
}

// Unenforced are the outcomes, where nothing enforces the file lists
// (FileListsUnenforced), of the cases of a path outside every list, by
// case name. Each is still checked: a change either way fails until this
// list says it.
var Unenforced = map[string]policyCase{
	"read outside every list": {command: sh("cat /proc/version"), ok: true, output: []string{"Linux version"}},
	"list outside every list": {command: sh("ls /proc/1"), ok: true, output: []string{"status"}},
	"exec outside every list": {command: func(s PolicySandbox) []string { return []string{s.Outside, "echo", "ran"} }, ok: true, output: []string{"ran"}},
	// gVisor's own /proc/sys refuses it
	"write /proc/sys": {command: sh("echo corral > /proc/sys/kernel/domainname"), output: denied},
}

// denied are the messages of an access refused by Landlock (EACCES) or by
// a read-only mount (EROFS): which one a driver's file system gives first
// varies, the outcome does not.
var denied = []string{"Permission denied", "Read-only file system"}

// absent are the messages of a path that is not there (a shell's, ls's,
// the exec stage's), which is how a path outside every list is kept out
// where mounts enforce the lists.
// "Invalid argument" is what coreutils' ls says of every path on Debian's
// runsc 20221219, whose statx refuses the AT_NO_AUTOMOUNT flag ls passes
// (later gVisor accepts it): there, ls cannot tell what is absent.
var absent = []string{"No such file or directory", "nonexistent", "not found", "Invalid argument"}

// policyCase is one thing tried in a sandbox under Policy, and what must
// happen.
type policyCase struct {
	name    string
	command func(s PolicySandbox) []string
	ok      bool     // exit code 0, else not 0 (or code, when set)
	code    int      // the exit code, when not 0 or 1
	output  []string // stdout or stderr holds one of these
	// outside is set on a case of a path outside every list: where
	// mounts enforce the lists (FileListsByMounts) it is absent, so its
	// output is one of absent and a code of 126 (cannot execute) is 127
	// (not found).
	outside bool
	// memory is set on the case that allocates past the memory limit.
	memory bool
}

func sh(script string) func(PolicySandbox) []string {
	return func(PolicySandbox) []string { return []string{"sh", "-c", script} }
}

func probe(name string) func(PolicySandbox) []string {
	return func(s PolicySandbox) []string { return supervisor.ProbeArgv(s.Probe, name) }
}

var policyCases = []policyCase{
	{name: "read in read_only", command: sh("cat /etc/passwd >/dev/null && echo read"), ok: true, output: []string{"read"}},
	{name: "exec in read_only", command: sh("true && echo ran"), ok: true, output: []string{"ran"}},
	{name: "write in read_only", command: sh("echo x > /etc/corral-policy-test"), output: denied},
	{name: "create in read_only", command: sh("mkdir /etc/corral-policy-test"), output: denied},
	{name: "write in read_write", command: sh("echo kept > /tmp/f && cat /tmp/f"), ok: true, output: []string{"kept"}},
	{name: "write in the workdir", command: sh("echo kept > /sandbox/f && cat /sandbox/f"), ok: true, output: []string{"kept"}},
	{name: "write to /dev/null", command: sh("echo x > /dev/null && echo wrote"), ok: true, output: []string{"wrote"}},
	{name: "read outside every list", command: sh("cat /proc/version"), output: denied, outside: true},
	{name: "list outside every list", command: sh("ls /proc/1"), output: denied, outside: true},
	{name: "exec outside every list", command: func(s PolicySandbox) []string { return []string{s.Outside} }, code: 126, output: denied, outside: true},
	{name: "write through a symlink that points outside", command: sh("ln -sf /etc/passwd /sandbox/link && echo x >> /sandbox/link"), output: denied},
	{name: "write /proc/sys", command: sh("echo corral > /proc/sys/kernel/domainname"), output: denied, outside: true},
	{name: "mount", command: probe("mount"), ok: true, output: []string{"mount: EPERM"}},
	{name: "ptrace", command: probe("ptrace"), ok: true, output: []string{"ptrace: EPERM"}},
	{name: "bpf", command: probe("bpf"), ok: true, output: []string{"bpf: EPERM"}},
	{name: "keyctl", command: probe("keyctl"), ok: true, output: []string{"keyctl: EPERM"}},
	{name: "unshare", command: probe("unshare"), ok: true, output: []string{"unshare: EPERM"}},
	{name: "io_uring", command: probe("io_uring"), ok: true, output: []string{"io_uring: EPERM"}},
	{name: "personality ADDR_NO_RANDOMIZE", command: probe("personality"), ok: true, output: []string{"personality: EPERM"}},
	{name: "no_new_privs", command: probe("no_new_privs"), ok: true, output: []string{"no_new_privs: 1"}},
	{name: "seccomp filter", command: probe("seccomp"), ok: true, output: []string{"seccomp: 2"}},
	{name: "run_as_user", command: probe("uid"), ok: true, output: []string{fmt.Sprintf("uid: %d", PolicyUser)}},
	{name: "allocation past the memory limit", command: sh("dd if=/dev/zero of=/dev/null bs=256M count=1"), code: 137, memory: true},
	{name: "fork bomb past the pids limit", command: sh("for i in $(seq 64); do sleep 5 >/dev/null 2>&1 & done; wait"), output: []string{"fork", "Resource temporarily unavailable"}},
}

// RunPolicyCases checks, in a sandbox made with Policy, that each of the
// cases has its expected outcome, and that the driver reports every
// protection of the policy.
func RunPolicyCases(t *testing.T, s PolicySandbox) {
	got := s.Protections(t)
	wants := []string{"landlock ABI", "no_new_privs", fmt.Sprintf("user %d", PolicyUser), "seccomp default"}
	switch {
	case s.FileListsUnenforced:
		wants = append(wants[1:], "landlock unavailable", "gVisor", "pids 32 (RLIMIT_NPROC")
	case s.FileListsByMounts:
		wants[0] = "file lists: by mounts"
	}
	for _, want := range wants {
		if !strings.Contains(got, want) {
			t.Errorf("protections %q lack %q", got, want)
		}
	}
	for _, tc := range policyCases {
		if u, ok := Unenforced[tc.name]; ok && tc.outside && s.FileListsUnenforced {
			tc.command, tc.ok, tc.code, tc.output = u.command, u.ok, u.code, u.output
		}
		t.Run(tc.name, func(t *testing.T) {
			if tc.memory && s.MemoryEndsSandbox {
				t.Skip("the memory limit is the whole sandbox's: the driver's own test allocates past it")
			}
			command := tc.command(s)
			want, output := tc.code, tc.output
			if tc.outside && s.FileListsByMounts {
				output = absent
				if want == 126 {
					want = 127
				}
			}
			code, stdout, stderr := s.Exec(t, command...)
			switch {
			case tc.ok && code != 0:
				t.Errorf("%q: exit %d, want 0 (stdout %q, stderr %q)", command, code, stdout, stderr)
			case !tc.ok && want != 0 && code != want:
				t.Errorf("%q: exit %d, want %d (stdout %q, stderr %q)", command, code, want, stdout, stderr)
			case !tc.ok && code == 0:
				t.Errorf("%q: succeeded, want it refused (stdout %q)", command, stdout)
			}
			if len(output) > 0 && !containsAny(stdout+stderr, output) {
				t.Errorf("%q: output %q %q says none of %q", command, stdout, stderr, output)
			}
		})
	}
}

// containsAny reports whether s holds one of subs, whatever their case.
func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(strings.ToLower(s), strings.ToLower(sub)) {
			return true
		}
	}
	return false
}

// MustPolicy parses a policy's text, as the lifecycle does before it calls
// a driver.
func MustPolicy(t testing.TB, text string) policy.Policy {
	t.Helper()
	p, err := policy.Parse(text)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
