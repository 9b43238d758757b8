// Package registry is how a gateway finds its compute driver by name. Each
// driver has an Entry, which the driver's own package makes (as
// containerd's plugins and Nomad's drivers carry their config): how it is
// built, its settings (its [drivers.NAME] table of the config, and the
// gateway flags that set them), its defaults, and whether (and how)
// --driver auto may choose it. The wiring lists the entries of a build in
// the order auto tries them; the package imports no concrete driver.
package registry

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/corral-sandbox/corral/internal/config"
	"github.com/corral-sandbox/corral/internal/driver"
)

// Auto is the name that asks the registry to choose: the first driver, in
// registration order, whose probe says this host can run it.
const Auto = "auto"

// Env is what a driver is built from.
type Env struct {
	// Config holds what every driver gets (driver.Config's label, log cap)
	// and each driver's own [drivers.NAME] table.
	Config config.Config
	// Settings is this driver's table, decoded over its defaults (what its
	// Entry.Settings returns); nil for a driver that has none.
	Settings any
	// Home is the gateway's home; a driver keeps its state under it.
	Home string
	// Gateway is the gateway's identity, for driver.Config.Gateway.
	Gateway string
	// Epoch is the store's lease's, for driver.Config.Epoch.
	Epoch int64
	Log   *slog.Logger
	// Egress is the gateway's egress proxy, for the drivers that can
	// attach their sandboxes to it.
	Egress driver.Egress
	// Supervisor installs this build's corral-supervise under dir and
	// returns its path, for the drivers whose sandboxes run it.
	Supervisor func(dir string) (string, error)
}

// DriverConfig is what a driver is built with: the label, the gateway's
// identity, the log cap, its state directory, and the egress proxy when
// its sandboxes can have one (its entry's NoEgress says none).
func (env Env) DriverConfig(stateDir, noEgress string) driver.Config {
	logMax, _ := env.Config.SandboxLogMaxBytes() // validated with the rest
	c := driver.Config{Label: env.Config.SandboxLabel, Gateway: env.Gateway, Epoch: env.Epoch, StateDir: stateDir, LogMaxBytes: logMax}
	if noEgress == "" {
		c.Egress = env.Egress
	}
	return c
}

// Entry is one compute driver of this build.
type Entry struct {
	// Name is what --driver and compute_driver call it.
	Name string
	// Open builds the driver.
	Open func(ctx context.Context, env Env) (driver.Driver, error)
	// DefaultImage is the image of sandboxes created without one, when
	// the settings name none (Image).
	DefaultImage string
	// Supported, when set, says why this host cannot run the driver (nil:
	// it can); Open refuses a driver named explicitly on such a host.
	Supported func() error
	// Auto, when set, lets --driver auto choose this driver.
	Auto *Probe
	// NotAuto says, for a driver auto never chooses, what it is instead;
	// auto's error mentions it ("--driver fake simulates ...").
	NotAuto string
	// NoEgress says why this driver's sandboxes cannot have an egress
	// proxy with env's settings, or "" when they can; nil: they never can.
	NoEgress func(env Env) string
	// Settings, when set, returns the driver's settings with their
	// defaults: a pointer to a struct whose toml tags are the keys of its
	// [drivers.NAME] table. Open finds them decoded in Env.Settings.
	Settings func() any
	// Flags are the gateway's flags that set keys of that table.
	Flags []Flag
}

// Flag is a gateway flag that sets a key of a driver's table (a string).
type Flag struct {
	Name  string // "docker-host": --docker-host
	Key   string // "socket_path"
	Usage string
}

// WhyNoEgress is NoEgress, saying so for a driver that has none.
func (e Entry) WhyNoEgress(env Env) string {
	if e.NoEgress == nil {
		return "the " + e.Name + " driver serves no egress proxy"
	}
	return e.NoEgress(env)
}

// settings decodes the driver's [drivers.NAME] table of cfg over its
// defaults; a key it does not take is an error naming it.
func (e Entry) settings(cfg config.Config) (any, error) {
	out, unknown, err := e.decode(cfg.Drivers[e.Name])
	if err != nil {
		return nil, fmt.Errorf("[drivers.%s]: %w", e.Name, err)
	}
	if len(unknown) > 0 {
		return nil, fmt.Errorf("unknown key %s", quoted(unknown))
	}
	return out, nil
}

// decode decodes a driver's table over its defaults, and returns the
// keys it does not take, in full ("drivers.docker.bogus").
func (e Entry) decode(table map[string]any) (any, []string, error) {
	if e.Settings == nil {
		return nil, fullKeys(e.Name, slices.Sorted(maps.Keys(table))), nil
	}
	out := e.Settings()
	var buf bytes.Buffer
	if err := toml.NewEncoder(&buf).Encode(table); err != nil {
		return nil, nil, err
	}
	md, err := toml.Decode(buf.String(), out)
	if err != nil {
		// Its line is of the table as re-encoded here: name the key.
		return nil, nil, errors.New(decodeLine.ReplaceAllString(err.Error(), "$1: "))
	}
	var unknown []string
	for _, k := range md.Undecoded() {
		unknown = append(unknown, k.String())
	}
	return out, fullKeys(e.Name, unknown), nil
}

// decodeLine is the start of a decode error of the toml package.
var decodeLine = regexp.MustCompile(`^toml: (?:line \d+ )?\(last key "([^"]*)"\): `)

// fullKeys are a driver table's keys as the config file names them.
func fullKeys(driver string, keys []string) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = "drivers." + driver + "." + k
	}
	return out
}

// quoted is "a", "b".
func quoted(keys []string) string {
	q := make([]string, len(keys))
	for i, k := range keys {
		q[i] = strconv.Quote(k)
	}
	return strings.Join(q, ", ")
}

// Env is env for entry e: its settings decoded from env.Config.
func (e Entry) Env(env Env) (Env, error) {
	s, err := e.settings(env.Config)
	env.Settings = s
	return env, err
}

// Image is the default image of sandboxes on this driver: the settings'
// default_image, else the driver's own.
func (e Entry) Image(cfg config.Config) string {
	if cfg.DefaultImage != "" {
		return cfg.DefaultImage
	}
	return e.DefaultImage
}

// Probe is how auto finds out whether this host can run a driver.
type Probe struct {
	// Check returns nil when this host can run the driver. It may return
	// the driver it had to build to find out (Docker's is pinged), which
	// auto then uses instead of calling Open.
	Check func(ctx context.Context, env Env) (driver.Driver, error)
	// Chosen says why it was chosen, for the log: "an engine answers".
	Chosen string
	// Missing says what auto did not find, followed by Check's error in
	// parentheses: "no Docker engine answers".
	Missing string
	// Remedy says what to install or run to have the driver.
	Remedy string
}

// Registry is the drivers of one build, in the order auto tries them.
type Registry struct {
	entries []Entry
}

// New is a registry of these entries. An entry without a name or Open, or
// a name given twice, is a programming error: New panics.
func New(entries ...Entry) *Registry {
	r := &Registry{}
	for _, e := range entries {
		r.Register(e)
	}
	return r
}

// Register adds an entry after the others; see New.
func (r *Registry) Register(e Entry) {
	switch {
	case e.Name == "" || e.Name == Auto || e.Open == nil:
		panic(fmt.Sprintf("registry: driver %q needs a name other than %q and an Open", e.Name, Auto))
	case e.Auto != nil && e.Auto.Check == nil:
		panic(fmt.Sprintf("registry: driver %q has an auto probe without Check", e.Name))
	}
	if _, ok := r.Lookup(e.Name); ok {
		panic(fmt.Sprintf("registry: driver %q registered twice", e.Name))
	}
	r.entries = append(r.entries, e)
}

// UnknownKeys are the keys of the driver tables that no driver of this
// build takes, as the config file names them ("drivers.docker.bogus"), so
// that the config's own error lists them with its other unknown keys.
func (r *Registry) UnknownKeys(tables config.Drivers) []string {
	unknown, _ := r.inspect(tables)
	return unknown
}

// Check says what is wrong with the driver tables of cfg: a table of no
// driver of this build, a key a driver does not take, a value of the
// wrong type.
func (r *Registry) Check(cfg config.Config) error {
	unknown, errs := r.inspect(cfg.Drivers)
	if len(unknown) > 0 {
		return fmt.Errorf("unknown key %s (this build's drivers are %s)", quoted(unknown), andList(r.Names()))
	}
	return errors.Join(errs...)
}

// inspect decodes each table once: the keys no driver takes, and the
// tables that do not decode.
func (r *Registry) inspect(tables config.Drivers) (unknown []string, errs []error) {
	for _, name := range slices.Sorted(maps.Keys(tables)) {
		e, ok := r.Lookup(name)
		if !ok {
			unknown = append(unknown, fullKeys(name, slices.Sorted(maps.Keys(tables[name])))...)
			continue
		}
		_, keys, err := e.decode(tables[name])
		if err != nil {
			errs = append(errs, fmt.Errorf("[drivers.%s]: %w", name, err))
		}
		unknown = append(unknown, keys...)
	}
	return unknown, errs
}

// Entries are the drivers of this build, in the order auto tries them.
func (r *Registry) Entries() []Entry { return slices.Clone(r.entries) }

// Lookup returns the entry of a driver's name.
func (r *Registry) Lookup(name string) (Entry, bool) {
	for _, e := range r.entries {
		if e.Name == name {
			return e, true
		}
	}
	return Entry{}, false
}

// Names are the drivers' names in registration order.
func (r *Registry) Names() []string {
	names := make([]string, len(r.entries))
	for i, e := range r.entries {
		names[i] = e.Name
	}
	return names
}

// Opened is the driver Open built, with its entry and the Env it was
// built with (its settings).
type Opened struct {
	Entry
	Env    Env
	Driver driver.Driver
}

// WhyNoEgress says why the driver's sandboxes cannot have an egress proxy
// with its settings, or "".
func (o Opened) WhyNoEgress() string { return o.Entry.WhyNoEgress(o.Env) }

// Open builds the driver that env.Config.ComputeDriver names; Auto is
// Choose's choice.
func (r *Registry) Open(ctx context.Context, env Env) (Opened, error) {
	name := env.Config.ComputeDriver
	if name == Auto {
		e, d, err := r.Choose(ctx, env)
		if err != nil {
			return Opened{}, err
		}
		eenv, err := e.Env(env)
		if err != nil {
			return Opened{}, err
		}
		if d != nil {
			return Opened{Entry: e, Env: eenv, Driver: d}, nil
		}
		name = e.Name
	}
	e, ok := r.Lookup(name)
	if !ok {
		return Opened{}, fmt.Errorf("unknown compute driver %q: this build has %s", name, andList(append([]string{Auto}, r.Names()...)))
	}
	if e.Supported != nil {
		if err := e.Supported(); err != nil {
			return Opened{}, fmt.Errorf("%s driver: %w", e.Name, err)
		}
	}
	eenv, err := e.Env(env)
	if err != nil {
		return Opened{}, err
	}
	d, err := e.Open(ctx, eenv)
	return Opened{Entry: e, Env: eenv, Driver: d}, err
}

// Choose is what auto picks: the first driver whose probe passes, with
// the driver the probe built, if it built one (then Open is not called).
// With none it is an error that says, in one line, what each probe missed
// and what to install or run; auto never means a driver without a probe.
func (r *Registry) Choose(ctx context.Context, env Env) (Entry, driver.Driver, error) {
	var missed, remedies []string
	var attrs []any // what each probe before the chosen one said
	for _, e := range r.entries {
		if e.Auto == nil {
			continue
		}
		eenv, err := e.Env(env)
		if err != nil {
			return Entry{}, nil, err
		}
		d, err := e.Auto.Check(ctx, eenv)
		if err == nil {
			env.Log.Info("compute driver: "+e.Name+" ("+e.Auto.Chosen+")", attrs...)
			return e, d, nil
		}
		attrs = append(attrs, e.Name, err)
		missed = append(missed, fmt.Sprintf("%s (%v)", e.Auto.Missing, err))
		remedies = append(remedies, e.Auto.Remedy)
	}
	msg := fmt.Sprintf("--driver %s found no compute driver", Auto)
	if len(missed) > 0 {
		msg += ": " + strings.Join(missed, ", and ") + ". " + strings.Join(remedies, ", or ")
	}
	for _, e := range r.entries {
		if e.Auto == nil && e.NotAuto != "" {
			msg += "; --driver " + e.Name + " " + e.NotAuto
		}
	}
	return Entry{}, nil, errors.New(msg)
}

// andList is "a, b and c".
func andList(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}
