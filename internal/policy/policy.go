// Package policy parses and validates a sandbox's YAML policy. Unknown
// keys, wrong types and bad values are errors that name the line and the
// field.
package policy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Version is the policy format this build knows.
const Version = 1

// Policy is a sandbox policy.
type Policy struct {
	Version    int        `yaml:"version"`
	Filesystem Filesystem `yaml:"filesystem_policy"`
	Landlock   Landlock   `yaml:"landlock"`
	Process    Process    `yaml:"process"`
	Limits     Limits     `yaml:"limits"`
}

// Filesystem lists what a sandbox may read and write.
type Filesystem struct {
	IncludeWorkdir *bool  `yaml:"include_workdir"`
	ReadOnly       []Path `yaml:"read_only"`
	ReadWrite      []Path `yaml:"read_write"`
}

// Landlock says how much Landlock support is required.
type Landlock struct {
	Compatibility Choice `yaml:"compatibility"`
}

// Process tunes the processes of a sandbox.
type Process struct {
	RunAsUser       *int   `yaml:"run_as_user"`
	NoNewPrivileges *bool  `yaml:"no_new_privileges"`
	Seccomp         string `yaml:"seccomp"`
}

// Limits are resource limits; zero means unlimited.
type Limits struct {
	Memory ByteSize `yaml:"memory"`
	CPUs   CPUs     `yaml:"cpus"`
	Pids   int64    `yaml:"pids"`
}

// Parse parses and validates a policy; an empty text is the empty policy.
func Parse(text string) (Policy, error) {
	var p Policy
	if strings.TrimSpace(text) == "" {
		return p, nil
	}
	dec := yaml.NewDecoder(bytes.NewReader([]byte(text)))
	dec.KnownFields(true)
	if err := dec.Decode(&p); err != nil {
		if errors.Is(err, io.EOF) {
			return p, nil
		}
		return p, fmt.Errorf("policy: %s", strings.TrimPrefix(err.Error(), "yaml: "))
	}
	if p.Version != Version {
		return p, fmt.Errorf("policy: version %d is not known to this gateway (want version: %d)", p.Version, Version)
	}
	if p.Limits.Pids < 0 {
		return p, fmt.Errorf("policy: limits.pids: %d is negative", p.Limits.Pids)
	}
	if s := p.Process.Seccomp; s != "" && s != "default" && s != "unconfined" && !filepath.IsAbs(s) {
		return p, fmt.Errorf("policy: process.seccomp: %q is not default, unconfined or an absolute path to a profile", s)
	}
	return p, nil
}

// Path is an absolute path.
type Path string

// UnmarshalYAML implements yaml.Unmarshaler.
func (p *Path) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode || !filepath.IsAbs(n.Value) {
		return fmt.Errorf("line %d: %q is not an absolute path", n.Line, n.Value)
	}
	*p = Path(filepath.Clean(n.Value))
	return nil
}

// Choice is landlock.compatibility: best_effort or hard_requirement.
type Choice string

// The Landlock compatibilities.
const (
	BestEffort      Choice = "best_effort"
	HardRequirement Choice = "hard_requirement"
)

// UnmarshalYAML implements yaml.Unmarshaler.
func (c *Choice) UnmarshalYAML(n *yaml.Node) error {
	if v := Choice(n.Value); n.Kind == yaml.ScalarNode && (v == BestEffort || v == HardRequirement) {
		*c = v
		return nil
	}
	return fmt.Errorf("line %d: landlock.compatibility: %q is not best_effort or hard_requirement", n.Line, n.Value)
}

// ByteSize is a memory size: a number of bytes, or one with a suffix
// (Ki, Mi, Gi, Ti in powers of 1024; K, M, G, T in powers of 1000).
type ByteSize int64

var units = map[string]float64{
	"": 1, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
	"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40,
}

// UnmarshalYAML implements yaml.Unmarshaler.
func (b *ByteSize) UnmarshalYAML(n *yaml.Node) error {
	v := strings.TrimSpace(n.Value)
	i := strings.IndexFunc(v, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	num, unit := v, ""
	if i >= 0 {
		num, unit = v[:i], v[i:]
	}
	f, err := strconv.ParseFloat(num, 64)
	mult, ok := units[unit]
	if n.Kind != yaml.ScalarNode || err != nil || !ok || f <= 0 || f*mult > math.MaxInt64 {
		return fmt.Errorf("line %d: limits.memory: %q is not a size such as 512Mi or 2Gi", n.Line, n.Value)
	}
	*b = ByteSize(f * mult)
	return nil
}

// Bytes is the size in bytes.
func (b ByteSize) Bytes() int64 { return int64(b) }

// CPUs is a number of CPUs, fractions allowed.
type CPUs float64

// UnmarshalYAML implements yaml.Unmarshaler.
func (c *CPUs) UnmarshalYAML(n *yaml.Node) error {
	f, err := strconv.ParseFloat(n.Value, 64)
	if n.Kind != yaml.ScalarNode || err != nil || f <= 0 || f > 1e6 {
		return fmt.Errorf("line %d: limits.cpus: %q is not a positive number of CPUs such as 1.5", n.Line, n.Value)
	}
	*c = CPUs(f)
	return nil
}

// Millis is the CPU limit in thousandths of a CPU.
func (c CPUs) Millis() int64 { return int64(math.Round(float64(c) * 1000)) }
