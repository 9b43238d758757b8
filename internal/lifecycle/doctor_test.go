package lifecycle

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/corral-sandbox/corral/internal/driver"
)

// noGVisor is a driver whose host cannot run the gVisor tier.
type noGVisor struct{ driver.Driver }

func (noGVisor) GVisor() error { return errors.New("no runsc here") }

// The doctor says when the driver's gVisor tier is not available, and why.
func TestDoctorSaysTheGVisorTierIsMissing(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Driver = noGVisor{c.Driver} })
	findings, err := h.m.Doctor(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range findings {
		if strings.Contains(f.Problem, "gVisor tier") && strings.Contains(f.Problem, "no runsc here") {
			return
		}
	}
	t.Errorf("doctor findings %+v do not say the gVisor tier is missing", findings)
}
