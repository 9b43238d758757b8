package gateway

import (
	"github.com/corral-sandbox/corral/internal/config"
	"github.com/corral-sandbox/corral/internal/driver/docker"
	"github.com/corral-sandbox/corral/internal/driver/fake"
	"github.com/corral-sandbox/corral/internal/driver/kubernetes"
	"github.com/corral-sandbox/corral/internal/driver/native"
	"github.com/corral-sandbox/corral/internal/driver/registry"
)

// computeDrivers are the drivers of this build, in the order --driver
// auto tries them; each driver's package makes its entry (settings,
// flags, how it is built). auto never means the fake driver, whose
// sandboxes do not exist.
var computeDrivers = registry.New(docker.Entry(), native.Entry(), kubernetes.Entry(), fake.Entry(fakeFaults))

// DriverFlag is a gateway flag that sets a key of a driver's settings.
type DriverFlag struct {
	Driver string
	registry.Flag
}

// DriverFlags are the flags of this build's drivers.
func DriverFlags() []DriverFlag {
	var out []DriverFlag
	for _, e := range computeDrivers.Entries() {
		for _, f := range e.Flags {
			out = append(out, DriverFlag{Driver: e.Name, Flag: f})
		}
	}
	return out
}

// CheckDriverSettings says what is wrong with the [drivers.NAME] tables
// of cfg: a driver this build has not, a key a driver does not take.
func CheckDriverSettings(cfg config.Config) error { return computeDrivers.Check(cfg) }

// UnknownDriverKeys are the keys of driver tables no driver of this build
// takes, as a config file names them (config.Load lists them).
func UnknownDriverKeys(tables config.Drivers) []string { return computeDrivers.UnknownKeys(tables) }
