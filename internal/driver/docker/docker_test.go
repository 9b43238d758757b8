package docker

import (
	"testing"

	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/driver/drivertest"
	"github.com/corral-sandbox/corral/internal/testenv"
)

// supervisor is a freshly built corral, mounted into the test containers.
var supervisor string

func TestMain(m *testing.M) {
	testenv.MainWithCorral(m, &supervisor)
}

func newTestDriver(t *testing.T, label string) *Driver {
	t.Helper()
	testenv.RequireDocker(t)
	d, err := New(driver.Config{Label: label, StateDir: t.TempDir()}, Options{PullPolicy: "never", Supervisor: supervisor})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func TestConformance(t *testing.T) {
	testenv.RequireDocker(t)
	drivertest.RunWith(t, func(t *testing.T, label string) driver.Driver { return newTestDriver(t, label) },
		drivertest.Options{Image: testenv.TestImage})
}
