package fake

import (
	"context"
	"path/filepath"

	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/driver/registry"
)

// Settings are the [drivers.fake] table of the gateway's config.
type Settings struct {
	// StateDir holds the fake objects (and a test build's fault rules);
	// default HOME/fake.
	StateDir string `toml:"state_dir"`
}

// Entry is the fake driver's entry in a gateway's registry: auto never
// chooses it. faults, when set, gives the driver of a state directory
// its fault injection (a test build's gateway does).
func Entry(faults func(stateDir string) Faults) registry.Entry {
	return registry.Entry{
		Name: "fake", DefaultImage: "busybox:latest",
		Settings: func() any { return &Settings{} },
		Open: func(_ context.Context, env registry.Env) (driver.Driver, error) {
			dir := env.Settings.(*Settings).StateDir
			if dir == "" {
				dir = filepath.Join(env.Home, "fake")
			}
			var opts Options
			if faults != nil {
				opts.Faults = faults(dir)
			}
			return New(driver.Config{Label: env.Config.SandboxLabel, Gateway: env.Gateway, Epoch: env.Epoch, StateDir: dir}, opts)
		},
		NoEgress: func(registry.Env) string { return "the fake driver's sandboxes do not exist" },
		NotAuto:  "simulates sandboxes, for tests only",
	}
}
