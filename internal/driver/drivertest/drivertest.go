// Package drivertest is the conformance suite every compute driver must
// pass. A driver's own tests call Run with a constructor:
//
//	func TestConformance(t *testing.T) {
//		drivertest.Run(t, func(t *testing.T, label string) driver.Driver { ... })
//	}
//
// The suite only uses the driver.Driver interface, bounds every call with a
// timeout and deletes the objects it made, so it can run against real
// backends (Docker) as well as the fake driver.
package drivertest

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/policy"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

// CallTimeout bounds every driver call the suite makes.
const CallTimeout = 30 * time.Second

// NewDriver builds a driver that marks its objects with the label key
// label. Drivers built with the same *testing.T must share one backend
// (one daemon, one state directory), so that the suite can prove drivers
// with different labels keep out of each other's way. The suite closes
// every driver it builds when the (sub)test that built it ends.
type NewDriver func(t *testing.T, label string) driver.Driver

// Options tune the suite for a backend.
type Options struct {
	// Image and Command are what the suite's objects run; real drivers
	// need an image that exists and a command that keeps running. The
	// defaults are DefaultImage and DefaultCommand.
	Image   string
	Command []string
	// PrintCommand is the main command of the logs case (default
	// DefaultPrintCommand).
	PrintCommand []string
	// PullImage is an image the driver's PullImage can bring (default
	// Image); the images case runs a sandbox on it, then removes it.
	PullImage string
	// InvalidImage, when set, is an image Validate must refuse.
	InvalidImage string
	// Isolation is the policy's isolation tier of every object (default
	// policy.IsolationNamespaces).
	Isolation string
}

// The defaults of Options.
var (
	DefaultImage   = "corral-test/busybox:latest"
	DefaultCommand = []string{"sleep", "3600"}
)

// Run runs the conformance suite with the default options.
func Run(t *testing.T, newDriver NewDriver) {
	t.Helper()
	RunWith(t, newDriver, Options{})
}

// RunWith runs the conformance suite.
func RunWith(t *testing.T, newDriver NewDriver, opts Options) {
	t.Helper()
	if opts.Image == "" {
		opts.Image = DefaultImage
	}
	if opts.PullImage == "" {
		opts.PullImage = opts.Image
	}
	if opts.Command == nil {
		opts.Command = DefaultCommand
	}
	if opts.PrintCommand == nil {
		opts.PrintCommand = DefaultPrintCommand
	}
	s := &suite{newDriver: newDriver, opts: opts}
	for _, tc := range append([]struct {
		name string
		fn   func(t *testing.T)
	}{
		{"CreateInspect", s.testCreateInspect},
		{"CreateTwiceAdopts", s.testCreateTwiceAdopts},
		{"StartIdempotent", s.testStartIdempotent},
		{"StopIdempotent", s.testStopIdempotent},
		{"StopMissing", s.testStopMissing},
		{"StartMissing", s.testStartMissing},
		{"NewIncarnation", s.testNewIncarnation},
		{"CreateOverRunning", s.testCreateOverRunning},
		{"StartOtherGeneration", s.testStartOtherGeneration},
		{"Delete", s.testDelete},
		{"ListOnlyOwn", s.testListOnlyOwn},
		{"LabelsIsolate", s.testLabelsIsolate},
		{"CancelledContext", s.testCancelledContext},
	}, s.optionalCases()...) {
		t.Run(tc.name, tc.fn)
	}
}

type suite struct {
	newDriver NewDriver
	opts      Options
}

// policy is the policy of the suite's objects.
func (s *suite) policy() policy.Policy {
	p := policy.Default()
	p.Isolation = s.opts.Isolation
	return p
}

// newLabel returns a label key no other run uses, so that objects left by
// another run (or another gateway) on a shared backend never show up.
func newLabel() string {
	return "corral.test." + sandbox.ShortID(sandbox.NewID())
}

// tdriver is a driver under test with the helpers the suite uses.
type tdriver struct {
	driver.Driver
	t     *testing.T
	label string
	s     *suite
}

// driver builds a driver with a fresh label; it is closed when t ends.
func (s *suite) driver(t *testing.T) *tdriver {
	t.Helper()
	return s.driverWithLabel(t, newLabel())
}

func (s *suite) driverWithLabel(t *testing.T, label string) *tdriver {
	t.Helper()
	d := s.newDriver(t, label)
	if d == nil {
		t.Fatal("newDriver returned nil")
	}
	if d.Name() == "" {
		t.Error("driver has an empty Name")
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return &tdriver{Driver: d, t: t, label: label, s: s}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), CallTimeout)
	t.Cleanup(cancel)
	return c
}

// spec returns the spec of a new sandbox, and deletes whatever the driver
// made for it when the test ends.
func (d *tdriver) spec(generation int64) driver.Spec {
	d.t.Helper()
	id := sandbox.NewID()
	d.t.Cleanup(func() {
		c, cancel := context.WithTimeout(context.Background(), CallTimeout)
		defer cancel()
		if err := d.Delete(c, id); err != nil {
			d.t.Errorf("cleanup: Delete(%s): %v", id, err)
		}
	})
	return driver.Spec{
		ID:         id,
		Name:       "dt-" + sandbox.ShortID(id),
		Generation: generation,
		Image:      d.s.opts.Image,
		Command:    slices.Clone(d.s.opts.Command),
		Labels:     map[string]string{"corral.test.purpose": "conformance"},
		Policy:     d.s.policy(),
	}
}

func (d *tdriver) create(spec driver.Spec) {
	d.t.Helper()
	if err := d.Create(ctx(d.t), spec); err != nil {
		d.t.Fatalf("Create(%s, generation %d): %v", spec.ID, spec.Generation, err)
	}
}

func (d *tdriver) start(id string, generation int64) {
	d.t.Helper()
	if err := d.Start(ctx(d.t), driver.Ref{ID: id, Generation: generation}); err != nil {
		d.t.Fatalf("Start(%s, generation %d): %v", id, generation, err)
	}
}

func (d *tdriver) stop(id string, generation int64) {
	d.t.Helper()
	if err := d.Stop(ctx(d.t), driver.Ref{ID: id, Generation: generation}, driver.StopOptions{Timeout: 5 * time.Second}); err != nil {
		d.t.Fatalf("Stop(%s, generation %d): %v", id, generation, err)
	}
}

func (d *tdriver) delete(id string) {
	d.t.Helper()
	if err := d.Delete(ctx(d.t), id); err != nil {
		d.t.Fatalf("Delete(%s): %v", id, err)
	}
}

func (d *tdriver) inspect(id string) driver.Object {
	d.t.Helper()
	obj, err := d.Inspect(ctx(d.t), id)
	if err != nil {
		d.t.Fatalf("Inspect(%s): %v", id, err)
	}
	if obj.ID != id {
		d.t.Fatalf("Inspect(%s) returned the object of %s", id, obj.ID)
	}
	return obj
}

func (d *tdriver) inspectMissing(id string) {
	d.t.Helper()
	obj, err := d.Inspect(ctx(d.t), id)
	if !errors.Is(err, errdefs.ErrNotFound) {
		d.t.Fatalf("Inspect(%s) = %+v, %v; want errdefs.ErrNotFound", id, obj, err)
	}
}

// list returns the ids List reports, checking each carries the label.
func (d *tdriver) list() []string {
	d.t.Helper()
	objs, err := d.List(ctx(d.t))
	if err != nil {
		d.t.Fatalf("List: %v", err)
	}
	var ids []string
	for _, o := range objs {
		if o.Labels[d.label] != "true" {
			d.t.Errorf("List returned object %s without label %s=true: %v", o.ID, d.label, o.Labels)
		}
		ids = append(ids, o.ID)
	}
	slices.Sort(ids)
	return ids
}

func (d *tdriver) expect(obj driver.Object, state driver.State, generation int64) {
	d.t.Helper()
	if obj.State != state || obj.Generation != generation {
		d.t.Errorf("object %s is %s at generation %d, want %s at generation %d", obj.ID, obj.State, obj.Generation, state, generation)
	}
	if got, want := obj.Labels[driver.LabelGeneration], strconv.FormatInt(generation, 10); got != want {
		d.t.Errorf("object %s has label %s=%q, want %q", obj.ID, driver.LabelGeneration, got, want)
	}
}

func (s *suite) testCreateInspect(t *testing.T) {
	d := s.driver(t)
	spec := d.spec(3)
	d.create(spec)
	obj := d.inspect(spec.ID)
	d.expect(obj, driver.StateCreated, 3)
	for k, want := range map[string]string{
		driver.LabelSandboxID: spec.ID,
		driver.LabelName:      spec.Name,
		d.label:               "true",
	} {
		if got := obj.Labels[k]; got != want {
			t.Errorf("object has label %s=%q, want %q", k, got, want)
		}
	}
	for k, want := range spec.Labels {
		if got := obj.Labels[k]; got != want {
			t.Errorf("object lost the spec's label %s: got %q, want %q", k, got, want)
		}
	}
	if ids := d.list(); !slices.Equal(ids, []string{spec.ID}) {
		t.Errorf("List = %v, want [%s]", ids, spec.ID)
	}
}

func (s *suite) testCreateTwiceAdopts(t *testing.T) {
	d := s.driver(t)
	spec := d.spec(1)
	d.create(spec)
	d.create(spec)
	d.expect(d.inspect(spec.ID), driver.StateCreated, 1)
	if ids := d.list(); !slices.Equal(ids, []string{spec.ID}) {
		t.Fatalf("after creating twice List = %v, want one object %s", ids, spec.ID)
	}
	// Adopting a running object leaves it running.
	d.start(spec.ID, 1)
	d.create(spec)
	d.expect(d.inspect(spec.ID), driver.StateRunning, 1)
	if ids := d.list(); !slices.Equal(ids, []string{spec.ID}) {
		t.Errorf("after adopting a running object List = %v, want one object %s", ids, spec.ID)
	}
}

func (s *suite) testStartIdempotent(t *testing.T) {
	d := s.driver(t)
	spec := d.spec(1)
	d.create(spec)
	d.start(spec.ID, 1)
	d.expect(d.inspect(spec.ID), driver.StateRunning, 1)
	d.start(spec.ID, 1)
	d.expect(d.inspect(spec.ID), driver.StateRunning, 1)
}

func (s *suite) testStopIdempotent(t *testing.T) {
	d := s.driver(t)
	spec := d.spec(1)
	d.create(spec)
	d.start(spec.ID, 1)
	d.stop(spec.ID, 1)
	d.expect(d.inspect(spec.ID), driver.StateStopped, 1)
	d.stop(spec.ID, 1)
	d.expect(d.inspect(spec.ID), driver.StateStopped, 1)
	// A stopped incarnation starts again.
	d.start(spec.ID, 1)
	d.expect(d.inspect(spec.ID), driver.StateRunning, 1)
}

func (s *suite) testStopMissing(t *testing.T) {
	d := s.driver(t)
	spec := d.spec(1)
	d.stop(spec.ID, 1)
	d.inspectMissing(spec.ID)
}

func (s *suite) testStartMissing(t *testing.T) {
	d := s.driver(t)
	spec := d.spec(1)
	if err := d.Start(ctx(t), driver.Ref{ID: spec.ID, Generation: 1}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("Start of a missing object = %v, want errdefs.ErrNotFound", err)
	}
	d.inspectMissing(spec.ID)
}

func (s *suite) testNewIncarnation(t *testing.T) {
	d := s.driver(t)
	spec := d.spec(1)
	d.create(spec)
	d.start(spec.ID, 1)
	d.stop(spec.ID, 1)

	// A stopped object is replaced by a new incarnation through Create...
	next := spec
	next.Generation = 2
	d.create(next)
	d.expect(d.inspect(spec.ID), driver.StateCreated, 2)
	d.create(next) // ...which is adopted like any other
	d.start(spec.ID, 2)
	d.expect(d.inspect(spec.ID), driver.StateRunning, 2)
	d.start(spec.ID, 2)
	d.expect(d.inspect(spec.ID), driver.StateRunning, 2)
	if ids := d.list(); !slices.Equal(ids, []string{spec.ID}) {
		t.Errorf("after a new incarnation List = %v, want one object %s", ids, spec.ID)
	}

	// So is an object that was created but never started.
	never := d.spec(1)
	d.create(never)
	never.Generation = 5
	d.create(never)
	d.expect(d.inspect(never.ID), driver.StateCreated, 5)
}

func (s *suite) testCreateOverRunning(t *testing.T) {
	d := s.driver(t)
	spec := d.spec(1)
	d.create(spec)
	d.start(spec.ID, 1)
	next := spec
	next.Generation = 2
	if err := d.Create(ctx(t), next); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("Create of generation 2 over a running generation 1 = %v, want errdefs.ErrFailedPrecondition", err)
	}
	d.expect(d.inspect(spec.ID), driver.StateRunning, 1)
}

func (s *suite) testStartOtherGeneration(t *testing.T) {
	d := s.driver(t)
	spec := d.spec(2)
	d.create(spec)
	for _, gen := range []int64{1, 3} {
		if err := d.Start(ctx(t), driver.Ref{ID: spec.ID, Generation: gen}); !errors.Is(err, errdefs.ErrFailedPrecondition) {
			t.Errorf("Start of generation %d of a generation 2 object = %v, want errdefs.ErrFailedPrecondition", gen, err)
		}
	}
	d.expect(d.inspect(spec.ID), driver.StateCreated, 2)
	d.start(spec.ID, 2)
	if err := d.Start(ctx(t), driver.Ref{ID: spec.ID, Generation: 3}); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("Start of generation 3 of a running generation 2 object = %v, want errdefs.ErrFailedPrecondition", err)
	}
	d.expect(d.inspect(spec.ID), driver.StateRunning, 2)
}

func (s *suite) testDelete(t *testing.T) {
	d := s.driver(t)
	spec := d.spec(1)
	keep := d.spec(1)
	d.create(spec)
	d.create(keep)
	d.start(spec.ID, 1)
	d.delete(spec.ID)
	d.delete(spec.ID)
	d.inspectMissing(spec.ID)
	if err := d.Start(ctx(t), driver.Ref{ID: spec.ID, Generation: 1}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Start after Delete = %v, want errdefs.ErrNotFound", err)
	}
	if ids := d.list(); !slices.Equal(ids, []string{keep.ID}) {
		t.Errorf("after Delete List = %v, want only [%s]", ids, keep.ID)
	}
	d.expect(d.inspect(keep.ID), driver.StateCreated, 1)
	// A deleted sandbox's id can be created afresh.
	d.create(spec)
	d.expect(d.inspect(spec.ID), driver.StateCreated, 1)
}

func (s *suite) testListOnlyOwn(t *testing.T) {
	a := s.driver(t)
	if ids := a.list(); len(ids) != 0 {
		t.Fatalf("List with a new label = %v, want nothing", ids)
	}
	b := s.driver(t)
	var mine []string
	for range 2 {
		spec := a.spec(1)
		a.create(spec)
		mine = append(mine, spec.ID)
	}
	other := b.spec(1)
	b.create(other)
	slices.Sort(mine)
	if ids := a.list(); !slices.Equal(ids, mine) {
		t.Errorf("List = %v, want only this driver's %v", ids, mine)
	}
	if ids := b.list(); !slices.Equal(ids, []string{other.ID}) {
		t.Errorf("other driver's List = %v, want only [%s]", ids, other.ID)
	}
}

func (s *suite) testLabelsIsolate(t *testing.T) {
	a, b := s.driver(t), s.driver(t)
	specA, specB := a.spec(1), b.spec(1)
	a.create(specA)
	a.start(specA.ID, 1)
	b.create(specB)

	// b neither sees nor touches a's object...
	b.inspectMissing(specA.ID)
	if err := b.Start(ctx(t), driver.Ref{ID: specA.ID, Generation: 1}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Start of another gateway's object = %v, want errdefs.ErrNotFound", err)
	}
	b.stop(specA.ID, 1)
	b.delete(specA.ID)
	a.expect(a.inspect(specA.ID), driver.StateRunning, 1)

	// ...nor a b's.
	a.inspectMissing(specB.ID)
	if err := a.Start(ctx(t), driver.Ref{ID: specB.ID, Generation: 1}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Start of another gateway's object = %v, want errdefs.ErrNotFound", err)
	}
	a.delete(specB.ID)
	b.expect(b.inspect(specB.ID), driver.StateCreated, 1)

	if ids := a.list(); !slices.Equal(ids, []string{specA.ID}) {
		t.Errorf("List = %v, want [%s]", ids, specA.ID)
	}
	if ids := b.list(); !slices.Equal(ids, []string{specB.ID}) {
		t.Errorf("other driver's List = %v, want [%s]", ids, specB.ID)
	}
}

func (s *suite) testCancelledContext(t *testing.T) {
	d := s.driver(t)
	running, created := d.spec(1), d.spec(1)
	d.create(running)
	d.start(running.ID, 1)
	d.create(created)
	fresh := d.spec(1)

	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	stopOpts := driver.StopOptions{Timeout: 5 * time.Second}
	calls := []struct {
		name string
		call func() error
	}{
		{"Create", func() error { return d.Create(cancelled, fresh) }},
		{"Start", func() error { return d.Start(cancelled, driver.Ref{ID: created.ID, Generation: 1}) }},
		{"Stop", func() error { return d.Stop(cancelled, driver.Ref{ID: running.ID, Generation: 1}, stopOpts) }},
		{"Delete", func() error { return d.Delete(cancelled, running.ID) }},
		{"Inspect", func() error { _, err := d.Inspect(cancelled, running.ID); return err }},
		{"List", func() error { _, err := d.List(cancelled); return err }},
	}
	for _, c := range calls {
		done := make(chan error, 1)
		go func() { done <- c.call() }()
		select {
		case err := <-done:
			if err == nil {
				t.Errorf("%s with a cancelled context succeeded", c.name)
			}
		case <-time.After(CallTimeout):
			t.Fatalf("%s with a cancelled context did not return within %v", c.name, CallTimeout)
		}
	}
}
