// Package policy parses and validates a sandbox's YAML policy. Unknown
// keys, wrong types, relative paths, bad values and an unknown version are
// errors that name the line and the field.
package policy

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Version is the policy format this build knows.
const Version = 1

// Policy is a sandbox policy.
type Policy struct {
	Version    int        `json:"version"`
	Filesystem Filesystem `json:"filesystem_policy"`
	Landlock   Landlock   `json:"landlock"`
	Process    Process    `json:"process"`
	Limits     Limits     `json:"limits"`
	// Network is network_policies, in the file's order; none: no egress.
	Network []NetworkPolicy `json:"network_policies,omitempty"`
	// Credentials are the secrets the egress proxy injects, in the file's
	// order.
	Credentials []Credential `json:"credentials,omitempty"`
	// Isolation is the tier the sandbox runs on: IsolationNamespaces
	// (also when empty, as in records older than the field) or
	// IsolationGVisor.
	Isolation string `json:"isolation,omitempty"`
	// Lifecycle is what the gateway does with the sandbox by itself.
	Lifecycle Lifecycle `json:"lifecycle"`
}

// Lifecycle is what the gateway does with a sandbox by itself.
type Lifecycle struct {
	// AutoResume: an exec, a file operation or a connection to one of its
	// ports resumes a paused sandbox first, instead of being refused.
	AutoResume bool `json:"auto_resume,omitempty"`
	// IdleTimeout, when set, is how long a running sandbox may go without
	// an exec, a file operation, a connection to one of its ports or an
	// API call naming it before OnIdle is done to it.
	IdleTimeout time.Duration `json:"idle_timeout,omitempty"`
	OnIdle      string        `json:"on_idle,omitempty"` // OnPause (the default), OnStop or OnDelete
	// MaxLifetime, when set, is how long after its creation OnExpiry is
	// done to the sandbox.
	MaxLifetime time.Duration `json:"max_lifetime,omitempty"`
	OnExpiry    string        `json:"on_expiry,omitempty"` // OnStop (the default) or OnDelete
	// MemorySnapshots, on the gVisor tier, runs the sandbox on gVisor's
	// own network stack (loopback only: no egress, no ports reached from
	// outside), which runsc can checkpoint: snapshots with --memory.
	MemorySnapshots bool `json:"memory_snapshots,omitempty"`
}

// What the gateway does to an idle or expired sandbox.
const (
	OnPause  = "pause"
	OnStop   = "stop"
	OnDelete = "delete"
)

// lifetime reads a duration of the lifecycle: Go's (90s, 15m, 2h30m) or
// days (7d), 1 s at least.
func lifetime(n *yaml.Node, field string) (time.Duration, error) {
	const want = "a duration such as 90s, 15m, 12h or 7d (1s at least)"
	s, err := scalar(n, field, want)
	if err != nil {
		return 0, err
	}
	var d time.Duration
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, perr := strconv.Atoi(days)
		d, err = time.Duration(n)*24*time.Hour, perr
	} else {
		d, err = time.ParseDuration(s)
	}
	if err != nil || d < time.Second || d > 10*365*24*time.Hour {
		return 0, &Error{Line: n.Line, Field: field, Msg: fmt.Sprintf("want %s, not %s", want, describe(n))}
	}
	return d, nil
}

// The isolation tiers.
const (
	// IsolationNamespaces runs the sandbox on the host's kernel, in
	// namespaces, under Landlock and seccomp.
	IsolationNamespaces = "namespaces"
	// IsolationGVisor runs the sandbox on gVisor's user-space kernel
	// (runsc): its system calls never reach the host's kernel directly.
	IsolationGVisor = "gvisor"
)

// GVisor tells whether the policy asks for the gVisor tier.
func (p Policy) GVisor() bool { return p.Isolation == IsolationGVisor }

// Filesystem lists what a sandbox may read and write. When Set, every path
// not listed (nor the workdir, with IncludeWorkdir) is neither readable nor
// writable.
type Filesystem struct {
	Set            bool     `json:"set"`
	IncludeWorkdir bool     `json:"include_workdir"`
	ReadOnly       []string `json:"read_only,omitempty"`
	ReadWrite      []string `json:"read_write,omitempty"`
}

// Landlock says whether the sandbox may run where the kernel lacks
// (some of) Landlock: BestEffort or HardRequirement.
type Landlock struct {
	Compatibility string `json:"compatibility"`
	// Given says the policy named the compatibility rather than taking
	// the default: where file lists cannot be enforced, only a policy that
	// says best_effort runs without them.
	Given bool `json:"-"`
}

// The Landlock compatibilities.
const (
	BestEffort      = "best_effort"
	HardRequirement = "hard_requirement"
)

// Process tunes the processes of a sandbox.
type Process struct {
	// RunAsUser is the uid (and gid) processes run as; nil keeps the
	// image's user.
	RunAsUser       *int   `json:"run_as_user,omitempty"`
	NoNewPrivileges bool   `json:"no_new_privileges"`
	Seccomp         string `json:"seccomp"` // SeccompDefault, SeccompUnconfined or a profile's path
}

// The seccomp settings besides a profile's path.
const (
	SeccompDefault    = "default"
	SeccompUnconfined = "unconfined"
)

// Limits are resource limits; zero means unlimited.
type Limits struct {
	MemoryBytes int64 `json:"memory_bytes,omitempty"`
	CPUMillis   int64 `json:"cpu_millis,omitempty"` // thousandths of a CPU
	Pids        int64 `json:"pids,omitempty"`
	// TmpBytes is the size of the sandbox's private /tmp (a tmpfs);
	// 0 means DefaultTmpBytes.
	TmpBytes int64 `json:"tmp_bytes,omitempty"`
	// DiskBytes, when set, is the size of the sandbox's /sandbox: a file
	// system of its own, set when the sandbox is created.
	DiskBytes int64 `json:"disk_bytes,omitempty"`
}

// DefaultPids caps the processes of a sandbox whose policy sets no
// limits.pids: a fork bomb exhausts its sandbox, not the host.
const DefaultPids = 4096

// PidsMax is the cap on the sandbox's processes.
func (l Limits) PidsMax() int64 {
	if l.Pids > 0 {
		return l.Pids
	}
	return DefaultPids
}

// MinDiskBytes is the smallest limits.disk.
const MinDiskBytes = 8 << 20

// DefaultTmpBytes is the size of a sandbox's /tmp when limits.tmp is not set.
const DefaultTmpBytes = 64 << 20

// Tmp is the size of the sandbox's /tmp.
func (l Limits) Tmp() int64 {
	if l.TmpBytes > 0 {
		return l.TmpBytes
	}
	return DefaultTmpBytes
}

// DefaultUser is the uid (and gid) a sandbox's processes run as when its
// policy names no run_as_user: an unprivileged user, on every driver that
// can give the sandbox one.
const DefaultUser = 1000

// WithDefaultUser returns p with run_as_user DefaultUser unless it names a
// user (0 included).
func (p Policy) WithDefaultUser() Policy {
	if p.Process.RunAsUser == nil {
		uid := DefaultUser
		p.Process.RunAsUser = &uid
	}
	return p
}

// Default is the policy of a sandbox created without one: no file system
// lists, the default seccomp filter, no_new_privs, no limits.
func Default() Policy {
	return Policy{Version: Version, Filesystem: Filesystem{IncludeWorkdir: true},
		Landlock: Landlock{Compatibility: BestEffort},
		Process:  Process{NoNewPrivileges: true, Seccomp: SeccompDefault}}
}

// Error is a policy error: where, which field, and what is wrong.
type Error struct {
	File  string // set by ReadFile
	Line  int
	Field string
	Msg   string
}

func (e *Error) Error() string {
	where := fmt.Sprintf("line %d", e.Line)
	if e.File != "" {
		where = fmt.Sprintf("%s:%d", e.File, e.Line)
	}
	if e.Field == "" {
		return fmt.Sprintf("%s: %s", where, e.Msg)
	}
	return fmt.Sprintf("%s: %s: %s", where, e.Field, e.Msg)
}

// ReadFile reads and parses a policy file; its errors name the file. It
// returns the file's text too, to be stored as it was written.
func ReadFile(path string) (Policy, string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Policy{}, "", err
	}
	p, err := Parse(string(data))
	var e *Error
	if errors.As(err, &e) {
		e.File = path
	}
	return p, string(data), err
}

// Parse parses and validates a policy. An empty text is the default
// policy.
func Parse(text string) (Policy, error) {
	p := Default()
	if strings.TrimSpace(text) == "" {
		return p, nil
	}
	dec := yaml.NewDecoder(strings.NewReader(text))
	var doc yaml.Node
	if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
		return p, nil // comments only
	} else if err != nil {
		return p, syntaxError(err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return p, &Error{Line: extra.Line, Msg: "a policy is one YAML document; this is a second one"}
	}
	if len(doc.Content) == 0 {
		return Default(), nil
	}
	root := doc.Content[0]
	p.Version = 0
	err := walk(root, "", fields{
		"version": func(n *yaml.Node, f string) (err error) {
			p.Version, err = integer(n, f, 0, math.MaxInt32)
			return err
		},
		"filesystem_policy": func(n *yaml.Node, f string) error {
			p.Filesystem.Set = true
			return walk(n, f, fields{
				"include_workdir": func(n *yaml.Node, f string) (err error) {
					p.Filesystem.IncludeWorkdir, err = boolean(n, f)
					return err
				},
				"read_only": func(n *yaml.Node, f string) (err error) {
					p.Filesystem.ReadOnly, err = paths(n, f)
					return err
				},
				"read_write": func(n *yaml.Node, f string) (err error) {
					p.Filesystem.ReadWrite, err = paths(n, f)
					return err
				},
			})
		},
		"landlock": func(n *yaml.Node, f string) error {
			return walk(n, f, fields{"compatibility": func(n *yaml.Node, f string) (err error) {
				p.Landlock.Compatibility, err = oneOf(n, f, BestEffort, HardRequirement)
				p.Landlock.Given = true
				return err
			}})
		},
		"process": func(n *yaml.Node, f string) error {
			return walk(n, f, fields{
				"run_as_user": func(n *yaml.Node, f string) error {
					uid, err := integer(n, f, 0, math.MaxInt32-1)
					p.Process.RunAsUser = &uid
					return err
				},
				"no_new_privileges": func(n *yaml.Node, f string) (err error) {
					p.Process.NoNewPrivileges, err = boolean(n, f)
					return err
				},
				"seccomp": func(n *yaml.Node, f string) (err error) {
					p.Process.Seccomp, err = seccomp(n, f)
					return err
				},
			})
		},
		"network_policies": func(n *yaml.Node, f string) (err error) {
			p.Network, err = network(n, f)
			return err
		},
		"credentials": func(n *yaml.Node, f string) (err error) {
			p.Credentials, err = credentials(n, f)
			return err
		},
		"lifecycle": func(n *yaml.Node, f string) error {
			err := walk(n, f, fields{
				"auto_resume": func(n *yaml.Node, f string) (err error) {
					p.Lifecycle.AutoResume, err = boolean(n, f)
					return err
				},
				"idle_timeout": func(n *yaml.Node, f string) (err error) {
					p.Lifecycle.IdleTimeout, err = lifetime(n, f)
					return err
				},
				"on_idle": func(n *yaml.Node, f string) (err error) {
					p.Lifecycle.OnIdle, err = oneOf(n, f, OnPause, OnStop, OnDelete)
					return err
				},
				"max_lifetime": func(n *yaml.Node, f string) (err error) {
					p.Lifecycle.MaxLifetime, err = lifetime(n, f)
					return err
				},
				"on_expiry": func(n *yaml.Node, f string) (err error) {
					p.Lifecycle.OnExpiry, err = oneOf(n, f, OnStop, OnDelete)
					return err
				},
				"memory_snapshots": func(n *yaml.Node, f string) (err error) {
					p.Lifecycle.MemorySnapshots, err = boolean(n, f)
					return err
				},
			})
			l := &p.Lifecycle
			switch {
			case err != nil:
				return err
			case l.OnIdle != "" && l.IdleTimeout == 0:
				return &Error{Line: n.Line, Field: f + ".on_idle", Msg: "is done after idle_timeout, which is not set"}
			case l.OnExpiry != "" && l.MaxLifetime == 0:
				return &Error{Line: n.Line, Field: f + ".on_expiry", Msg: "is done after max_lifetime, which is not set"}
			}
			if l.IdleTimeout > 0 && l.OnIdle == "" {
				l.OnIdle = OnPause
			}
			if l.MaxLifetime > 0 && l.OnExpiry == "" {
				l.OnExpiry = OnStop
			}
			return nil
		},
		"isolation": func(n *yaml.Node, f string) (err error) {
			p.Isolation, err = oneOf(n, f, IsolationNamespaces, IsolationGVisor)
			return err
		},
		"limits": func(n *yaml.Node, f string) error {
			return walk(n, f, fields{
				"memory": func(n *yaml.Node, f string) (err error) {
					p.Limits.MemoryBytes, err = byteSize(n, f)
					return err
				},
				"cpus": func(n *yaml.Node, f string) (err error) {
					p.Limits.CPUMillis, err = cpus(n, f)
					return err
				},
				"pids": func(n *yaml.Node, f string) (err error) {
					v, err := integer(n, f, 1, math.MaxInt32)
					p.Limits.Pids = int64(v)
					return err
				},
				"tmp": func(n *yaml.Node, f string) (err error) {
					p.Limits.TmpBytes, err = byteSize(n, f)
					return err
				},
				"disk": func(n *yaml.Node, f string) (err error) {
					p.Limits.DiskBytes, err = byteSize(n, f)
					if err == nil && p.Limits.DiskBytes < MinDiskBytes {
						err = &Error{Line: n.Line, Field: f, Msg: fmt.Sprintf("want %d Mi at least, not %s", MinDiskBytes>>20, describe(n))}
					}
					return err
				},
			})
		},
	})
	if err != nil {
		return p, err
	}
	if p.Version != Version {
		line := root.Line
		if v := find(root, "version"); v != nil {
			line = v.Line
		}
		return p, &Error{Line: line, Field: "version", Msg: fmt.Sprintf("version %d is not known to this gateway: write version: %d", p.Version, Version)}
	}
	if err := checkCredentials(p, root); err != nil {
		return p, err
	}
	if err := checkMemorySnapshots(p, root); err != nil {
		return p, err
	}
	return p, nil
}

// checkMemorySnapshots refuses lifecycle.memory_snapshots where it cannot
// hold: off the gVisor tier (CRIU, the namespaces tier's only way, cannot
// run on these hosts nor restore a Landlock domain), or with egress, which
// gVisor's own network stack, the only one runsc checkpoints, cannot reach.
func checkMemorySnapshots(p Policy, root *yaml.Node) error {
	if !p.Lifecycle.MemorySnapshots {
		return nil
	}
	line := find(find(root, "lifecycle"), "memory_snapshots").Line
	switch {
	case !p.GVisor():
		return &Error{Line: line, Field: "lifecycle.memory_snapshots", Msg: "needs isolation: gvisor: only gVisor's runsc checkpoints memory here " +
			"(CRIU fails on this kernel's vDSO and cannot restore a Landlock domain, which every sandbox of the namespaces tier runs in)"}
	case len(p.Network) > 0:
		return &Error{Line: line, Field: "lifecycle.memory_snapshots", Msg: "runs the sandbox on gVisor's own network stack, loopback only, " +
			"which runsc can checkpoint (it refuses the host's): it cannot have network_policies"}
	}
	return nil
}

// parserProblems are the YAML parser's (not scanner's) problems: yaml.v3
// reports them with the line before the construct they are in.
var parserProblems = []string{
	"did not find expected ',' or ']'", "did not find expected ',' or '}'",
	"did not find expected '-' indicator", "did not find expected <document start>",
	"did not find expected key", "did not find expected node content",
}

// syntaxError turns a YAML syntax error into an Error with the line where
// the broken construct starts.
func syntaxError(err error) error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	var line int
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if n, after, ok := strings.Cut(rest, ": "); ok {
			if l, err := strconv.Atoi(n); err == nil {
				line, msg = l, after
			}
		}
	}
	if slices.Contains(parserProblems, msg) {
		line++
	}
	return &Error{Line: max(line, 1), Msg: "not valid YAML (in what starts on this line): " + msg}
}

// fields are the keys a mapping may hold, each with what reads its value
// (given the node and the field's dotted name).
type fields map[string]func(n *yaml.Node, field string) error

// walk reads a mapping node key by key: an unknown or repeated key is an
// error.
func walk(n *yaml.Node, prefix string, known fields) error {
	if n.Kind != yaml.MappingNode {
		name := prefix
		if name == "" {
			return &Error{Line: n.Line, Msg: "a policy is a mapping of keys (version, isolation, filesystem_policy, landlock, process, limits, network_policies, credentials)"}
		}
		return &Error{Line: n.Line, Field: name, Msg: fmt.Sprintf("want a mapping of %s, not %s", keys(known), describe(n))}
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		field := k.Value
		if prefix != "" {
			field = prefix + "." + k.Value
		}
		read, ok := known[k.Value]
		if k.Kind != yaml.ScalarNode || !ok {
			where := "the policy"
			if prefix != "" {
				where = prefix
			}
			return &Error{Line: k.Line, Field: field, Msg: fmt.Sprintf("unknown key in %s (known: %s)", where, keys(known))}
		}
		if prev, dup := seen[k.Value]; dup {
			return &Error{Line: k.Line, Field: field, Msg: fmt.Sprintf("given twice (first on line %d)", prev)}
		}
		seen[k.Value] = k.Line
		if err := read(v, field); err != nil {
			return err
		}
	}
	return nil
}

func find(n *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

func keys(known fields) string {
	var ks []string
	for k := range known {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return strings.Join(ks, ", ")
}

// describe names what a node is, for error messages.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	}
	return fmt.Sprintf("%q", n.Value)
}

func scalar(n *yaml.Node, field, want string) (string, error) {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		return "", &Error{Line: n.Line, Field: field, Msg: fmt.Sprintf("want %s, not %s", want, describe(n))}
	}
	return n.Value, nil
}

func integer(n *yaml.Node, field string, lo, hi int) (int, error) {
	want := fmt.Sprintf("a whole number from %d to %d", lo, hi)
	s, err := scalar(n, field, want)
	if err != nil {
		return 0, err
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < lo || v > hi || n.Tag != "!!int" {
		return 0, &Error{Line: n.Line, Field: field, Msg: fmt.Sprintf("want %s, not %s", want, describe(n))}
	}
	return v, nil
}

func boolean(n *yaml.Node, field string) (bool, error) {
	s, err := scalar(n, field, "true or false")
	if err != nil {
		return false, err
	}
	switch {
	case n.Tag == "!!bool" && (s == "true" || s == "True" || s == "TRUE"):
		return true, nil
	case n.Tag == "!!bool" && (s == "false" || s == "False" || s == "FALSE"):
		return false, nil
	}
	return false, &Error{Line: n.Line, Field: field, Msg: fmt.Sprintf("want true or false, not %s", describe(n))}
}

func oneOf(n *yaml.Node, field string, choices ...string) (string, error) {
	want := strings.Join(choices, " or ")
	s, err := scalar(n, field, want)
	if err != nil {
		return "", err
	}
	for _, c := range choices {
		if s == c {
			return s, nil
		}
	}
	return "", &Error{Line: n.Line, Field: field, Msg: fmt.Sprintf("want %s, not %s", want, describe(n))}
}

func paths(n *yaml.Node, field string) ([]string, error) {
	if n.Kind != yaml.SequenceNode {
		return nil, &Error{Line: n.Line, Field: field, Msg: fmt.Sprintf("want a list of absolute paths, not %s", describe(n))}
	}
	out := make([]string, 0, len(n.Content))
	for i, item := range n.Content {
		f := fmt.Sprintf("%s[%d]", field, i)
		s, err := scalar(item, f, "an absolute path")
		if err != nil {
			return nil, err
		}
		if !filepath.IsAbs(s) {
			return nil, &Error{Line: item.Line, Field: f, Msg: fmt.Sprintf("%q is not an absolute path", s)}
		}
		out = append(out, filepath.Clean(s))
	}
	return out, nil
}

func seccomp(n *yaml.Node, field string) (string, error) {
	const want = "default, unconfined or the absolute path of a profile"
	s, err := scalar(n, field, want)
	if err != nil {
		return "", err
	}
	if s != SeccompDefault && s != SeccompUnconfined && !filepath.IsAbs(s) {
		return "", &Error{Line: n.Line, Field: field, Msg: fmt.Sprintf("want %s, not %q", want, s)}
	}
	return s, nil
}

// units are the suffixes of memory sizes: Ki, Mi, Gi, Ti in powers of
// 1024; K, M, G, T in powers of 1000.
var units = map[string]float64{
	"": 1, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
	"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40,
}

func byteSize(n *yaml.Node, field string) (int64, error) {
	const want = "a size such as 512Mi or 2Gi"
	s, err := scalar(n, field, want)
	if err != nil {
		return 0, err
	}
	size, err := ParseSize(s)
	if err != nil {
		return 0, &Error{Line: n.Line, Field: field, Msg: fmt.Sprintf("want %s (1Mi at least), not %s", want, describe(n))}
	}
	return size, nil
}

// ParseSize reads a size such as 512Mi, 2Gi or 10M (1Mi to 1Pi).
func ParseSize(s string) (int64, error) {
	i := strings.IndexFunc(s, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	num, unit := s, ""
	if i >= 0 {
		num, unit = s[:i], s[i:]
	}
	f, err := strconv.ParseFloat(num, 64)
	mult, ok := units[unit]
	if err != nil || !ok || f*mult < 1<<20 || f*mult > 1<<50 {
		return 0, fmt.Errorf("%q is not a size such as 512Mi or 2Gi (1Mi at least)", s)
	}
	return int64(f * mult), nil
}

func cpus(n *yaml.Node, field string) (int64, error) {
	const want = "a number of CPUs such as 1.5"
	s, err := scalar(n, field, want)
	if err != nil {
		return 0, err
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || f < 0.01 || f > 4096 {
		return 0, &Error{Line: n.Line, Field: field, Msg: fmt.Sprintf("want %s (0.01 to 4096), not %s", want, describe(n))}
	}
	return int64(math.Round(f * 1000)), nil
}
