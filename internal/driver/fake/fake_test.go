package fake_test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/driver/drivertest"
	"github.com/corral-sandbox/corral/internal/driver/fake"
	"github.com/corral-sandbox/corral/internal/driver/fake/faults"
	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

const label = "corral.managed"

func TestConformance(t *testing.T) {
	// Drivers built for the same test share one state dir, as two gateways
	// sharing one backend would.
	var (
		mu   sync.Mutex
		dirs = map[*testing.T]string{}
	)
	drivertest.RunWith(t, func(t *testing.T, label string) driver.Driver {
		mu.Lock()
		dir, ok := dirs[t]
		if !ok {
			dir = t.TempDir()
			dirs[t] = dir
		}
		mu.Unlock()
		d, err := fake.New(driver.Config{Label: label, StateDir: dir}, fake.Options{Faults: faults.File(dir)})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}, drivertest.Options{PrintCommand: []string{"echo", "corral-conformance-output"}})
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func newFake(t *testing.T, dir string) *fake.Driver {
	t.Helper()
	d, err := fake.New(driver.Config{Label: label, StateDir: dir}, fake.Options{Faults: faults.File(dir)})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// setup returns a fake driver over a fresh state dir with one created
// object, and that object's spec.
func setup(t *testing.T) (*fake.Driver, string, driver.Spec) {
	t.Helper()
	dir := t.TempDir()
	d := newFake(t, dir)
	spec := newSpec()
	if err := d.Create(ctx(t), spec); err != nil {
		t.Fatal(err)
	}
	return d, dir, spec
}

func newSpec() driver.Spec {
	id := sandbox.NewID()
	return driver.Spec{ID: id, Name: "sb-" + sandbox.ShortID(id), Generation: 1}
}

func setFaults(t *testing.T, dir string, rules ...faults.Rule) {
	t.Helper()
	if err := faults.Set(dir, rules...); err != nil {
		t.Fatal(err)
	}
}

func state(t *testing.T, d *fake.Driver, id string) driver.State {
	t.Helper()
	obj, err := d.Inspect(ctx(t), id)
	if err != nil {
		t.Fatalf("Inspect(%s): %v", id, err)
	}
	return obj.State
}

func starts(t *testing.T, dir, id string) int {
	t.Helper()
	n, err := fake.Starts(dir, id)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func ref(spec driver.Spec) driver.Ref { return driver.Ref{ID: spec.ID, Generation: spec.Generation} }

func TestNewNeedsLabel(t *testing.T) {
	if _, err := fake.New(driver.Config{StateDir: t.TempDir()}, fake.Options{}); err == nil {
		t.Error("New without a label succeeded")
	}
}

func TestFaultFail(t *testing.T) {
	d, dir, spec := setup(t)
	other := newSpec()
	if err := d.Create(ctx(t), other); err != nil {
		t.Fatal(err)
	}
	setFaults(t, dir, faults.Rule{Op: "start", Sandbox: spec.ID, Action: "fail", Error: "disk on fire"})

	err := d.Start(ctx(t), ref(spec))
	if err == nil || !strings.Contains(err.Error(), "disk on fire") {
		t.Fatalf("Start under a fail rule = %v, want an error with the rule's message", err)
	}
	if s := state(t, d, spec.ID); s != driver.StateCreated {
		t.Errorf("a failed Start changed the object to %s", s)
	}
	if n := starts(t, dir, spec.ID); n != 0 {
		t.Errorf("a failed Start started the object %d times", n)
	}
	if err := d.Start(ctx(t), ref(other)); err != nil {
		t.Errorf("a rule for one sandbox failed Start of another: %v", err)
	}
	if err := d.Stop(ctx(t), ref(spec), driver.StopOptions{}); err != nil {
		t.Errorf("a start rule failed Stop: %v", err)
	}

	setFaults(t, dir)
	if err := d.Start(ctx(t), ref(spec)); err != nil {
		t.Fatalf("Start after removing the rule: %v", err)
	}
	if s := state(t, d, spec.ID); s != driver.StateRunning {
		t.Errorf("object is %s, want running", s)
	}
}

func TestFaultFailByName(t *testing.T) {
	d, dir, spec := setup(t)
	setFaults(t, dir, faults.Rule{Op: "inspect", Sandbox: spec.Name, Action: "fail"})
	_, err := d.Inspect(ctx(t), spec.ID)
	if err == nil || !strings.Contains(err.Error(), "injected failure") {
		t.Errorf("Inspect under a fail rule naming the sandbox = %v, want the default injected failure", err)
	}
}

func TestFaultDelay(t *testing.T) {
	d, dir, spec := setup(t)
	const delay = 200 * time.Millisecond
	setFaults(t, dir, faults.Rule{Op: "stop", Action: "delay", Delay: delay.String()})

	begin := time.Now()
	if err := d.Stop(ctx(t), ref(spec), driver.StopOptions{}); err != nil {
		t.Fatalf("Stop under a delay rule: %v", err)
	}
	if took := time.Since(begin); took < delay {
		t.Errorf("Stop under a %v delay rule took only %v", delay, took)
	}

	setFaults(t, dir, faults.Rule{Op: "stop", Action: "delay", Delay: "1h"})
	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- d.Stop(short, ref(spec), driver.StopOptions{}) }()
	if err := wait(t, done); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Stop delayed past its deadline = %v, want context.DeadlineExceeded", err)
	}

	setFaults(t, dir, faults.Rule{Op: "stop", Action: "delay", Delay: "soon"})
	if err := d.Stop(ctx(t), ref(spec), driver.StopOptions{}); err == nil {
		t.Error("Stop under a delay rule with a bad duration succeeded")
	}
}

// startHeld starts spec's object under a hold rule and waits until the call
// is held; the returned channel yields Start's result.
func startHeld(t *testing.T, c context.Context, d *fake.Driver, dir string, spec driver.Spec) <-chan error {
	t.Helper()
	setFaults(t, dir, faults.Rule{Op: "start", Sandbox: spec.ID, Action: "hold"})
	done := make(chan error, 1)
	go func() { done <- d.Start(c, ref(spec)) }()
	if err := faults.WaitHeld(ctx(t), dir, "start", spec.ID); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		t.Fatalf("Start under a hold rule returned %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	if s := state(t, d, spec.ID); s != driver.StateCreated {
		t.Fatalf("held Start already changed the object to %s", s)
	}
	return done
}

func wait(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("call did not return within 10s")
		return nil
	}
}

func assertNotHeld(t *testing.T, dir, op, id string) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(dir, "held", op+"."+id)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("held marker of %s %s is still there (%v)", op, id, err)
	}
}

func TestFaultHold(t *testing.T) {
	d, dir, spec := setup(t)
	done := startHeld(t, ctx(t), d, dir, spec)

	setFaults(t, dir)
	if err := wait(t, done); err != nil {
		t.Fatalf("released Start: %v", err)
	}
	if s := state(t, d, spec.ID); s != driver.StateRunning {
		t.Errorf("after the released Start the object is %s, want running", s)
	}
	assertNotHeld(t, dir, "start", spec.ID)
}

func TestFaultHoldCancelled(t *testing.T) {
	d, dir, spec := setup(t)
	c, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := startHeld(t, c, d, dir, spec)

	cancel()
	if err := wait(t, done); !errors.Is(err, context.Canceled) {
		t.Fatalf("held Start after cancel = %v, want context.Canceled", err)
	}
	if s := state(t, d, spec.ID); s != driver.StateCreated {
		t.Errorf("a cancelled held Start changed the object to %s", s)
	}
	if n := starts(t, dir, spec.ID); n != 0 {
		t.Errorf("a cancelled held Start started the object %d times", n)
	}
	assertNotHeld(t, dir, "start", spec.ID)
}

func TestWaitHeldTimesOut(t *testing.T) {
	dir := t.TempDir()
	newFake(t, dir)
	c, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := faults.WaitHeld(c, dir, "start", "nothing"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WaitHeld with nothing held = %v, want context.DeadlineExceeded", err)
	}
}

func TestFaultAfter(t *testing.T) {
	dir := t.TempDir()
	d := newFake(t, dir)
	spec := newSpec()
	setFaults(t, dir,
		faults.Rule{Op: "create", Action: "fail", Error: "reply lost", After: true},
		faults.Rule{Op: "start", Action: "fail", Error: "reply lost", After: true},
	)

	if err := d.Create(ctx(t), spec); err == nil || !strings.Contains(err.Error(), "reply lost") {
		t.Fatalf("Create under an after rule = %v, want the rule's error", err)
	}
	if s := state(t, d, spec.ID); s != driver.StateCreated {
		t.Fatalf("after a Create whose reply was lost the object is %s, want created", s)
	}
	if err := d.Start(ctx(t), ref(spec)); err == nil || !strings.Contains(err.Error(), "reply lost") {
		t.Fatalf("Start under an after rule = %v, want the rule's error", err)
	}
	if s := state(t, d, spec.ID); s != driver.StateRunning {
		t.Errorf("after a Start whose reply was lost the object is %s, want running", s)
	}

	// The retry finds the effect in place and does not repeat it.
	setFaults(t, dir)
	if err := d.Create(ctx(t), spec); err != nil {
		t.Fatal(err)
	}
	if err := d.Start(ctx(t), ref(spec)); err != nil {
		t.Fatal(err)
	}
	if n := starts(t, dir, spec.ID); n != 1 {
		t.Errorf("the object was started %d times, want once", n)
	}
}

func TestFaultUnknownAction(t *testing.T) {
	d, dir, spec := setup(t)
	setFaults(t, dir, faults.Rule{Op: "inspect", Action: "explode"})
	if _, err := d.Inspect(ctx(t), spec.ID); err == nil || !strings.Contains(err.Error(), "explode") {
		t.Errorf("Inspect under an unknown action = %v, want an error naming it", err)
	}
}

func TestFaultsFileCorrupt(t *testing.T) {
	d, dir, _ := setup(t)
	if err := os.WriteFile(filepath.Join(dir, faults.FaultsFile), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := d.List(ctx(t)); err == nil || !strings.Contains(err.Error(), faults.FaultsFile) {
		t.Errorf("List with a corrupt faults file = %v, want an error naming it", err)
	}
}

func TestObjectsFileBroken(t *testing.T) {
	for name, breakIt := range map[string]func(path string) error{
		"corrupt":    func(path string) error { return os.WriteFile(path, []byte("[1,2"), 0o600) },
		"unreadable": func(path string) error { os.Remove(path); return os.Mkdir(path, 0o700) },
	} {
		t.Run(name, func(t *testing.T) {
			d, dir, spec := setup(t)
			if err := breakIt(filepath.Join(dir, fake.ObjectsDir, spec.ID+".json")); err != nil {
				t.Fatal(err)
			}
			d = newFake(t, dir) // changed behind the drivers' back: seen by a new one
			if objs, err := d.List(ctx(t)); err == nil {
				t.Errorf("List with a broken object file = %v, want an error", objs)
			}
			if _, err := d.Inspect(ctx(t), spec.ID); err == nil || errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("Inspect with a broken object file = %v, want an error other than not found", err)
			}
		})
	}
}

func TestObjectsSurviveNew(t *testing.T) {
	dir := t.TempDir()
	d := newFake(t, dir)
	running, created := newSpec(), newSpec()
	for _, spec := range []driver.Spec{running, created} {
		if err := d.Create(ctx(t), spec); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Start(ctx(t), ref(running)); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}

	d2 := newFake(t, dir)
	if s := state(t, d2, running.ID); s != driver.StateRunning {
		t.Errorf("after New the running object is %s", s)
	}
	if s := state(t, d2, created.ID); s != driver.StateCreated {
		t.Errorf("after New the created object is %s", s)
	}
	objs, err := d2.List(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 2 {
		t.Errorf("after New List = %v, want two objects", objs)
	}
	if n := starts(t, dir, running.ID); n != 1 {
		t.Errorf("Starts = %d, want 1", n)
	}
	if err := d2.Start(ctx(t), ref(running)); err != nil {
		t.Fatal(err)
	}
	if n := starts(t, dir, running.ID); n != 1 {
		t.Errorf("starting a running object again counted a start: Starts = %d", n)
	}
}

func TestExit(t *testing.T) {
	d, dir, spec := setup(t)
	if err := fake.Exit(dir, spec.ID, 3); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("Exit of an object that does not run = %v, want ErrFailedPrecondition", err)
	}
	if err := d.Start(ctx(t), ref(spec)); err != nil {
		t.Fatal(err)
	}
	if err := fake.Exit(dir, spec.ID, 3); err != nil {
		t.Fatal(err)
	}
	obj, err := d.Inspect(ctx(t), spec.ID)
	if err != nil {
		t.Fatal(err)
	}
	if obj.State != driver.StateStopped || obj.ExitCode != 3 {
		t.Errorf("after Exit the object is %s with exit code %d, want stopped with 3", obj.State, obj.ExitCode)
	}
	if err := d.Start(ctx(t), ref(spec)); err != nil {
		t.Fatal(err)
	}
	if obj, err := d.Inspect(ctx(t), spec.ID); err != nil || obj.State != driver.StateRunning || obj.ExitCode != 0 {
		t.Errorf("after a restart Inspect = %+v, %v; want running with exit code 0", obj, err)
	}
}

func TestStartsOfMissing(t *testing.T) {
	if n, err := fake.Starts(t.TempDir(), sandbox.NewID()); err != nil || n != 0 {
		t.Errorf("Starts of a missing object = %d, %v; want 0", n, err)
	}
	_, err := newFake(t, t.TempDir()).Inspect(ctx(t), "missing")
	if !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Inspect of a missing object = %v, want ErrNotFound", err)
	}
}

// Watch reports the objects there are when it begins, then every change
// made through the state dir (an Exit from outside, a delete), but not the
// changes of another gateway's objects.
func TestWatchFollowsChanges(t *testing.T) {
	d, dir, spec := setup(t)
	if err := d.Start(ctx(t), ref(spec)); err != nil {
		t.Fatal(err)
	}
	other := newSpec()
	od, err := fake.New(driver.Config{Label: "other.gateway", StateDir: dir}, fake.Options{})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx(t))
	defer cancel()
	seen := make(chan string, 100)
	go func() { _ = d.Watch(wctx, func(id string) { seen <- id }) }()
	next := func(what string) string {
		t.Helper()
		select {
		case id := <-seen:
			return id
		case <-time.After(10 * time.Second):
			t.Fatalf("Watch did not report %s", what)
			return ""
		}
	}
	if id := next("the object there was"); id != spec.ID {
		t.Fatalf("first report %s, want %s", id, spec.ID)
	}
	if err := od.Create(ctx(t), other); err != nil { // not reported
		t.Fatal(err)
	}
	if err := fake.Exit(dir, spec.ID, 3); err != nil {
		t.Fatal(err)
	}
	if id := next("the exit"); id != spec.ID {
		t.Fatalf("after the exit Watch reported %s, want %s", id, spec.ID)
	}
	if err := d.Delete(ctx(t), spec.ID); err != nil {
		t.Fatal(err)
	}
	if id := next("the delete"); id != spec.ID {
		t.Fatalf("after the delete Watch reported %s, want %s", id, spec.ID)
	}
}

// inodes returns the inode numbers of the files in the state dir's objects
// and free dirs, each kept open until the test ends (so that no new file
// gets the number of one removed meanwhile).
func inodes(t *testing.T, dir string) map[uint64]bool {
	t.Helper()
	got := map[uint64]bool{}
	for _, sub := range []string{fake.ObjectsDir, "free"} {
		entries, err := os.ReadDir(filepath.Join(dir, sub))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			f, err := os.Open(filepath.Join(dir, sub, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { f.Close() })
			fi, err := f.Stat()
			if err != nil {
				t.Fatal(err)
			}
			got[fi.Sys().(*syscall.Stat_t).Ino] = true
		}
	}
	return got
}

// Steady calls reuse the files of deleted objects and of earlier versions
// instead of making new ones.
func TestFilesAreReused(t *testing.T) {
	dir := t.TempDir()
	d := newFake(t, dir)
	cycle := func() {
		t.Helper()
		spec := newSpec()
		for _, call := range []func() error{
			func() error { return d.Create(ctx(t), spec) },
			func() error { return d.Start(ctx(t), ref(spec)) },
			func() error { return d.Stop(ctx(t), ref(spec), driver.StopOptions{}) },
			func() error { return d.Delete(ctx(t), spec.ID) },
		} {
			if err := call(); err != nil {
				t.Fatal(err)
			}
		}
	}
	cycle()
	warm := inodes(t, dir)
	for range 20 {
		cycle()
	}
	for ino := range inodes(t, dir) {
		if !warm[ino] {
			t.Errorf("inode %d is new after the first cycle (had %v)", ino, warm)
		}
	}
}

// Drivers of two processes (here two New on one state dir, and the Exit
// helper) share the free files without ever writing one that became
// another's object.
func TestFreeFilesShared(t *testing.T) {
	dir := t.TempDir()
	d1, d2 := newFake(t, dir), newFake(t, dir)
	specs := make([]driver.Spec, 8)
	for i := range specs {
		specs[i] = newSpec()
		d := []*fake.Driver{d1, d2}[i%2]
		if err := d.Create(ctx(t), specs[i]); err != nil {
			t.Fatal(err)
		}
		if err := d.Start(ctx(t), ref(specs[i])); err != nil {
			t.Fatal(err)
		}
	}
	// Each deletes the other's half, which fills its free files; then each
	// creates and changes objects from them, interleaved.
	for i, spec := range specs[:4] {
		if err := []*fake.Driver{d2, d1}[i%2].Delete(ctx(t), spec.ID); err != nil {
			t.Fatal(err)
		}
	}
	for i := 4; i < 8; i++ {
		d := []*fake.Driver{d1, d2}[i%2]
		if err := d.Stop(ctx(t), ref(specs[i]), driver.StopOptions{}); err != nil {
			t.Fatal(err)
		}
		specs[i-4] = newSpec()
		if err := []*fake.Driver{d2, d1}[i%2].Create(ctx(t), specs[i-4]); err != nil {
			t.Fatal(err)
		}
	}
	if err := d1.Start(ctx(t), ref(specs[5])); err != nil {
		t.Fatal(err)
	}
	if err := fake.Exit(dir, specs[5].ID, 7); err != nil {
		t.Fatal(err)
	}
	want := map[string]driver.State{specs[5].ID: driver.StateStopped}
	for i := range 4 {
		want[specs[i].ID] = driver.StateCreated
	}
	for _, i := range []int{4, 6, 7} {
		want[specs[i].ID] = driver.StateStopped
	}
	list, err := newFake(t, dir).List(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != len(want) {
		t.Errorf("%d objects listed, want %d: %+v", len(list), len(want), list)
	}
	for _, o := range list {
		if st, ok := want[o.ID]; !ok || o.State != st {
			t.Errorf("object %s: state %s, want %q (listed: %v)", o.ID, o.State, st, ok)
		}
	}
	if o, err := d2.Inspect(ctx(t), specs[5].ID); err != nil || o.ExitCode != 7 {
		t.Errorf("Inspect after Exit from outside: %+v, %v; want exit code 7", o, err)
	}
}

// A call for a sandbox while another driver on the state dir (another
// gateway) has one in flight for it is written down with both epochs;
// calls of one driver at once, and calls one after the other, are not.
func TestOverlappingCallsAreWrittenDown(t *testing.T) {
	dir := t.TempDir()
	a, err := fake.New(driver.Config{Label: label, StateDir: dir, Epoch: 1}, fake.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := fake.New(driver.Config{Label: label, StateDir: dir, Epoch: 2}, fake.Options{})
	if err != nil {
		t.Fatal(err)
	}
	spec := newSpec()
	if err := a.Create(ctx(t), spec); err != nil {
		t.Fatal(err)
	}
	if err := a.Start(ctx(t), driver.Ref{ID: spec.ID, Generation: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Inspect(ctx(t), spec.ID); err != nil {
		t.Fatal(err)
	}
	if got, err := fake.Overlaps(dir); err != nil || len(got) != 0 {
		t.Fatalf("calls one after the other: overlaps %q, %v", got, err)
	}
	stdin, feed := io.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := a.Exec(ctx(t), spec.ID, driver.ExecOptions{Command: []string{"cat"}, Stdin: stdin})
		done <- err
	}()
	time.Sleep(200 * time.Millisecond) // the exec is in flight, reading its input
	if _, err := a.Inspect(ctx(t), spec.ID); err != nil {
		t.Fatal(err)
	}
	if got, _ := fake.Overlaps(dir); len(got) != 0 {
		t.Fatalf("two calls of one driver at once: overlaps %q", got)
	}
	if _, err := b.Inspect(ctx(t), spec.ID); err != nil {
		t.Fatal(err)
	}
	feed.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	got, err := fake.Overlaps(dir)
	if err != nil || len(got) != 1 || !strings.Contains(got[0], "epoch 2 inspect while pid") || !strings.Contains(got[0], "epoch 1 exec") {
		t.Errorf("a call while another driver's was in flight: overlaps %q, %v", got, err)
	}
}
