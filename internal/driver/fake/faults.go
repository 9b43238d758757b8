package fake

import (
	"context"

	"github.com/corral-sandbox/corral/internal/driver"
)

// Faults injects faults into the fake driver's calls: it holds, delays or
// fails them. Only tests and test builds give one (package faults); a
// fake driver without one runs every call as asked.
type Faults interface {
	// Inject runs before each call and, with c.After, once the call has
	// taken effect (a fault then is a reply lost); an error fails the call.
	Inject(ctx context.Context, c Call) error
}

// Call is one call of the fake driver, as fault injection sees it.
type Call struct {
	// Op is create, start, stop, delete, inspect, list or exec.
	Op string
	// ID is the sandbox's id ("" for list).
	ID    string
	After bool

	name string
	d    *Driver
}

// Name is the sandbox's name: the one the call carried, else its object's.
func (c Call) Name() string {
	if c.name != "" || c.ID == "" || c.d == nil {
		return c.name
	}
	o, err := c.d.read(c.ID)
	if err != nil || o == nil {
		return ""
	}
	return o.Labels[driver.LabelName]
}

// inject runs the driver's fault injection, when it has one.
func (d *Driver) inject(ctx context.Context, op, id, name string, after bool) error {
	if d.faults == nil {
		return nil
	}
	return d.faults.Inject(ctx, Call{Op: op, ID: id, After: after, name: name, d: d})
}
