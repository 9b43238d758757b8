package policy

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const example = `version: 1
filesystem_policy:
  include_workdir: true          # the workdir (/sandbox) is read-write
  read_only: [/bin, /usr, /lib, /etc]
  read_write: [/tmp, /dev/null]
landlock:
  compatibility: best_effort     # or hard_requirement
process:
  run_as_user: 1000              # optional; default: the image's user
  no_new_privileges: true
  seccomp: default               # default | unconfined | path to a profile
limits: {memory: 512Mi, cpus: 1.5, pids: 256}
`

func TestParseTheExample(t *testing.T) {
	p, err := Parse(example)
	if err != nil {
		t.Fatal(err)
	}
	fs := p.Filesystem
	if !fs.Set || !fs.IncludeWorkdir || strings.Join(fs.ReadOnly, ",") != "/bin,/usr,/lib,/etc" || strings.Join(fs.ReadWrite, ",") != "/tmp,/dev/null" {
		t.Errorf("filesystem_policy = %+v", fs)
	}
	if p.Landlock.Compatibility != BestEffort || p.Process.RunAsUser == nil || *p.Process.RunAsUser != 1000 ||
		!p.Process.NoNewPrivileges || p.Process.Seccomp != SeccompDefault {
		t.Errorf("landlock %+v, process %+v", p.Landlock, p.Process)
	}
	if want := (Limits{MemoryBytes: 512 << 20, CPUMillis: 1500, Pids: 256}); p.Limits != want {
		t.Errorf("limits = %+v, want %+v", p.Limits, want)
	}
}

func TestDefaults(t *testing.T) {
	for _, text := range []string{"", "  \n", "# nothing\n"} {
		if p, err := Parse(text); err != nil || p.Filesystem.Set || p.Process.Seccomp != SeccompDefault || !p.Process.NoNewPrivileges {
			t.Errorf("Parse(%q) = %+v, %v; want the default policy", text, p, err)
		}
	}
	p, err := Parse("version: 1\nfilesystem_policy: {read_only: [/usr]}\n")
	if err != nil || !p.Filesystem.IncludeWorkdir || p.Landlock.Compatibility != BestEffort {
		t.Errorf("defaults inside sections: %+v, %v", p, err)
	}
	p, err = Parse("version: 1\nfilesystem_policy: {include_workdir: false}\nlandlock: {compatibility: hard_requirement}\nprocess: {seccomp: unconfined, no_new_privileges: false}\n")
	if err != nil || p.Filesystem.IncludeWorkdir || p.Landlock.Compatibility != HardRequirement || p.Process.Seccomp != SeccompUnconfined || p.Process.NoNewPrivileges {
		t.Errorf("explicit settings: %+v, %v", p, err)
	}
	if p.GVisor() {
		t.Errorf("a policy without isolation asks for gVisor: %+v", p)
	}
	for text, gvisor := range map[string]bool{"version: 1\nisolation: gvisor\n": true, "version: 1\nisolation: namespaces\n": false} {
		if p, err := Parse(text); err != nil || p.GVisor() != gvisor {
			t.Errorf("Parse(%q) = %+v, %v; want gVisor %v", text, p, err, gvisor)
		}
	}
}

// malformed are policies that must be refused, each with the line and the
// text (usually the field) its error must name.
var malformed = []struct {
	text string
	line int
	want string
}{
	{"version: 2\n", 1, "version 2 is not known"},
	{"version: 0\n", 1, "version 0"},
	{"version: one\n", 1, "version: want a whole number"},
	{"version: 1.5\n", 1, "version: want a whole number"},
	{"version: -1\n", 1, "version"},
	{"limits: {pids: 3}\n", 1, "version 0 is not known"},
	{"version: 1\nversion: 1\n", 2, "version: given twice"},
	{"version: 1\nlimts: {}\n", 2, "limts: unknown key in the policy"},
	{"version: 1\nfilesystem: {}\n", 2, "filesystem: unknown key"},
	{"version: 1\nfilesystem_policy:\n  read_onyl: [/bin]\n", 3, "filesystem_policy.read_onyl: unknown key in filesystem_policy"},
	{"version: 1\nfilesystem_policy:\n  read_only: [/bin, usr]\n", 3, `filesystem_policy.read_only[1]: "usr" is not an absolute path`},
	{"version: 1\nfilesystem_policy:\n  read_write: [./tmp]\n", 3, "read_write[0]"},
	{"version: 1\nfilesystem_policy:\n  read_write: /tmp\n", 3, "read_write: want a list"},
	{"version: 1\nfilesystem_policy:\n  read_only: [[/bin]]\n", 3, "read_only[0]: want an absolute path, not a list"},
	{"version: 1\nfilesystem_policy:\n  read_only: [{a: b}]\n", 3, "read_only[0]"},
	{"version: 1\nfilesystem_policy:\n  read_only: [~]\n", 3, "read_only[0]"},
	{"version: 1\nfilesystem_policy:\n  include_workdir: yes please\n", 3, "include_workdir: want true or false"},
	{"version: 1\nfilesystem_policy:\n  include_workdir: 1\n", 3, "include_workdir: want true or false"},
	{"version: 1\nfilesystem_policy: [/bin]\n", 2, "filesystem_policy: want a mapping"},
	{"version: 1\nfilesystem_policy: /bin\n", 2, "filesystem_policy: want a mapping"},
	{"version: 1\nlandlock:\n  compatibility: strict\n", 3, "landlock.compatibility: want best_effort or hard_requirement"},
	{"version: 1\nlandlock:\n  compatability: best_effort\n", 3, "landlock.compatability: unknown key"},
	{"version: 1\nlandlock: best_effort\n", 2, "landlock: want a mapping"},
	{"version: 1\nprocess:\n  run_as_user: bob\n", 3, "process.run_as_user: want a whole number"},
	{"version: 1\nprocess:\n  run_as_user: -5\n", 3, "process.run_as_user"},
	{"version: 1\nprocess:\n  run_as_user: 99999999999\n", 3, "process.run_as_user"},
	{"version: 1\nprocess:\n  run_as_user: 1000.0\n", 3, "process.run_as_user"},
	{"version: 1\nprocess:\n  run_as_user:\n", 3, "process.run_as_user"},
	{"version: 1\nprocess:\n  no_new_privileges: maybe\n", 3, "process.no_new_privileges: want true or false"},
	{"version: 1\nprocess:\n  seccomp: strict\n", 3, "process.seccomp: want default, unconfined"},
	{"version: 1\nprocess:\n  seccomp: profiles/x.json\n", 3, "process.seccomp"},
	{"version: 1\nprocess:\n  seccomp: [default]\n", 3, "process.seccomp"},
	{"version: 1\nprocess:\n  user: 1000\n", 3, "process.user: unknown key in process"},
	{"version: 1\nlimits: {memory: lots}\n", 2, "limits.memory: want a size"},
	{"version: 1\nlimits: {memory: 512Xi}\n", 2, "limits.memory"},
	{"version: 1\nlimits: {memory: 10}\n", 2, "limits.memory: want a size such as 512Mi or 2Gi (1Mi at least)"},
	{"version: 1\nlimits: {memory: -1Gi}\n", 2, "limits.memory"},
	{"version: 1\nlimits: {memory: 1.5.5Gi}\n", 2, "limits.memory"},
	{"version: 1\nlimits: {cpus: many}\n", 2, "limits.cpus: want a number of CPUs"},
	{"version: 1\nlimits: {cpus: 0}\n", 2, "limits.cpus"},
	{"version: 1\nlimits: {cpus: -2}\n", 2, "limits.cpus"},
	{"version: 1\nlimits: {cpus: .nan}\n", 2, "limits.cpus"},
	{"version: 1\nlimits: {pids: 0}\n", 2, "limits.pids: want a whole number from 1"},
	{"version: 1\nlimits: {pids: 1e3}\n", 2, "limits.pids"},
	{"version: 1\nlimits: {pid: 10}\n", 2, "limits.pid: unknown key in limits"},
	{"version: 1\nlimits: 512Mi\n", 2, "limits: want a mapping"},
	{"version: 1\n---\nversion: 1\n", 2, "second one"},
	{"- version: 1\n", 1, "a policy is a mapping"},
	{"version 1\n", 1, "a policy is a mapping"},
	{"version: 1\nlimits: {memory: 1Gi\n", 2, "not valid YAML"},
	{"version: 1\n\tlimits: {}\n", 2, "not valid YAML"},
	{"version: 1\n? [a]\n: b\n", 2, "unknown key"},
	{"version: 1\nlimits: &l {pids: 5}\nprocess: *l\n", 3, "process"},
	{"version: 1\nisolation: gVisor\n", 2, "isolation: want namespaces or gvisor"},
	{"version: 1\nisolation: [gvisor]\n", 2, "isolation: want namespaces or gvisor"},
	{"version: 1\nisolation: vm\n", 2, "isolation"},
}

func TestMalformedPoliciesNameTheLineAndField(t *testing.T) {
	if len(malformed) < 50 {
		t.Fatalf("only %d malformed policies; the issue asks for 50", len(malformed))
	}
	for _, tc := range malformed {
		_, err := Parse(tc.text)
		var e *Error
		if !errors.As(err, &e) {
			t.Errorf("Parse(%q) = %v; want a policy error", tc.text, err)
			continue
		}
		if e.Line != tc.line || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %q (line %d); want line %d and %q", tc.text, err, e.Line, tc.line, tc.want)
		}
	}
}

func TestReadFileNamesTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(path, []byte("version: 1\nlimits: {pids: none}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, err := ReadFile(path)
	if err == nil || !strings.HasPrefix(err.Error(), path+":2: limits.pids: ") {
		t.Errorf("ReadFile = %v; want it to start with %s:2: limits.pids:", err, path)
	}
}

func FuzzParse(f *testing.F) {
	f.Add(example)
	for _, tc := range malformed {
		f.Add(tc.text)
	}
	f.Add(networkExample)
	for _, tc := range malformedNetwork {
		f.Add("version: 1\n" + tc.text)
	}
	f.Fuzz(func(t *testing.T, text string) {
		p, err := Parse(text)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Msg == "" {
				t.Fatalf("Parse(%q) = %v: not a policy error with a message", text, err)
			}
			if lines := strings.Count(text, "\n") + strings.Count(text, "\r") + 2; e.Line < 0 || e.Line > lines { // \r breaks lines in YAML
				t.Fatalf("Parse(%q) error on line %d, past the text", text, e.Line)
			}
			return
		}
		for _, path := range append(p.Filesystem.ReadOnly, p.Filesystem.ReadWrite...) {
			if !filepath.IsAbs(path) {
				t.Fatalf("Parse(%q) accepted the relative path %q", text, path)
			}
		}
		if p.Version != Version {
			t.Fatalf("Parse(%q) accepted version %d", text, p.Version)
		}
	})
}

func TestMemorySnapshotsOnGVisor(t *testing.T) {
	p, err := Parse("version: 1\nisolation: gvisor\nlifecycle:\n  memory_snapshots: true\n")
	if err != nil || !p.Lifecycle.MemorySnapshots {
		t.Fatalf("Parse: %+v, %v", p.Lifecycle, err)
	}
}

func TestLifecycle(t *testing.T) {
	p, err := Parse("version: 1\nlifecycle:\n  idle_timeout: 15m\n  max_lifetime: 7d\n  on_expiry: delete\n  auto_resume: true\n")
	if err != nil {
		t.Fatal(err)
	}
	l := p.Lifecycle
	if l.IdleTimeout != 15*time.Minute || l.OnIdle != OnPause || l.MaxLifetime != 7*24*time.Hour || l.OnExpiry != OnDelete || !l.AutoResume {
		t.Errorf("lifecycle: %+v", l)
	}
	for text, want := range map[string]string{
		"version: 1\nlifecycle:\n  idle_timeout: 500ms\n":                  "line 3: lifecycle.idle_timeout: want a duration",
		"version: 1\nlifecycle:\n  max_lifetime: soon\n":                   "line 3: lifecycle.max_lifetime: want a duration",
		"version: 1\nlifecycle:\n  idle_timeout: 1m\n  on_idle: sleep\n":   "line 4: lifecycle.on_idle: want pause or stop or delete",
		"version: 1\nlifecycle:\n  on_expiry: delete\n":                    "lifecycle.on_expiry: is done after max_lifetime, which is not set",
		"version: 1\nlifecycle:\n  max_lifetime: 1h\n  on_expiry: pause\n": "line 4: lifecycle.on_expiry: want stop or delete",
		"version: 1\nlifecycle:\n  memory_snapshots: true\n":               "line 3: lifecycle.memory_snapshots: needs isolation: gvisor",
		"version: 1\nisolation: gvisor\nnetwork_policies: {a: {endpoints: [{host: a.test, port: 443}]}}\nlifecycle:\n  memory_snapshots: true\n": "line 5: lifecycle.memory_snapshots: runs the sandbox on gVisor's own network stack",
	} {
		if _, err := Parse(text); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v; want %q", text, err, want)
		}
	}
}
