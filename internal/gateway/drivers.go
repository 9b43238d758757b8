package gateway

import (
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/corral-sandbox/corral/internal/config"
	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/driver/fake"
)

// openDriver builds the configured compute driver. "auto" picks the best
// driver this build has for the host.
func openDriver(cfg config.Config, home string, log *slog.Logger) (driver.Driver, error) {
	name := cfg.ComputeDriver
	if name == "auto" {
		// The Docker and native drivers are not in this build yet, so the
		// fake driver is the only one auto can pick; say so loudly.
		log.Warn("no real compute driver is built in yet; using the fake driver, whose sandboxes are simulated")
		name = "fake"
	}
	switch name {
	case "fake":
		dir := cfg.Drivers.Fake.StateDir
		if dir == "" {
			dir = filepath.Join(home, "fake")
		}
		return fake.New(driver.Config{Label: cfg.SandboxLabel, StateDir: dir})
	}
	return nil, fmt.Errorf("unknown compute driver %q: this build has fake (and auto)", name)
}
