// Package registry is how a gateway finds its compute driver by name. Each
// driver has an Entry: how it is built from the settings, its defaults,
// and whether (and how) --driver auto may choose it. The package imports
// no concrete driver: the entries are made by the wiring (internal/gateway),
// the one package that imports the drivers, so that the drivers themselves
// stay free of the gateway's settings.
package registry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

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
	// Home is the gateway's home; a driver keeps its state under it.
	Home string
	// Gateway is the gateway's identity, for driver.Config.Gateway.
	Gateway string
	Log     *slog.Logger
	// Egress is the gateway's egress proxy, for the drivers that can
	// attach their sandboxes to it.
	Egress driver.Egress
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
	// Auto, when set, lets --driver auto choose this driver.
	Auto *Probe
	// NotAuto says, for a driver auto never chooses, what it is instead;
	// auto's error mentions it ("--driver fake simulates ...").
	NotAuto string
	// NoEgress says why this driver's sandboxes cannot have an egress
	// proxy with these settings, or "" when they can; nil: they never can.
	NoEgress func(cfg config.Config) string
}

// WhyNoEgress is NoEgress, saying so for a driver that has none.
func (e Entry) WhyNoEgress(cfg config.Config) string {
	if e.NoEgress == nil {
		return "the " + e.Name + " driver serves no egress proxy"
	}
	return e.NoEgress(cfg)
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

// Open builds the driver that env.Config.ComputeDriver names; Auto is
// Choose's choice. It returns the driver's entry with it.
func (r *Registry) Open(ctx context.Context, env Env) (Entry, driver.Driver, error) {
	name := env.Config.ComputeDriver
	if name == Auto {
		e, d, err := r.Choose(ctx, env)
		if err != nil || d != nil {
			return e, d, err
		}
		name = e.Name
	}
	e, ok := r.Lookup(name)
	if !ok {
		return Entry{}, nil, fmt.Errorf("unknown compute driver %q: this build has %s", name, andList(append([]string{Auto}, r.Names()...)))
	}
	d, err := e.Open(ctx, env)
	return e, d, err
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
		d, err := e.Auto.Check(ctx, env)
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
