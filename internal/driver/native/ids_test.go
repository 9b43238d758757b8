package native

import (
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/testenv"
)

// Host id ranges: two drivers sharing a state dir give sandboxes made at
// once ranges of their own; a delete releases its range; a driver on a
// state dir whose objects have no reservations (an older version's) takes
// none of their ranges; a reservation whose sandbox is gone is taken over.
func TestIDRangesReserved(t *testing.T) {
	opts := Options{Supervisor: testenv.SupervisorOf(corral)}
	d1, d2 := newDriverWith(t, "corral.a", opts), newDriverWith(t, "corral.b", opts)
	newObject := func(d *Driver) *object {
		t.Helper()
		id := sandbox.NewID()
		if err := os.MkdirAll(d.sandboxDir(id), 0o700); err != nil {
			t.Fatal(err)
		}
		o := &object{ID: id, Generation: 1, Labels: map[string]string{d.cfg.Label: "true"}}
		if err := d.saveNew(o); err != nil {
			t.Fatal(err)
		}
		return o
	}
	var (
		mu   sync.Mutex
		objs []*object
		wg   sync.WaitGroup
	)
	for _, d := range []*Driver{d1, d2, d1, d2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				o := newObject(d)
				mu.Lock()
				objs = append(objs, o)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	holders := map[uint32]string{}
	for _, o := range objs {
		if other, ok := holders[o.IDBase]; ok || o.IDBase < idRangeFirst || (o.IDBase-idRangeFirst)%idRangeSize != 0 {
			t.Fatalf("sandbox %s got range %d (also %q's)", o.ID, o.IDBase, other)
		}
		holders[o.IDBase] = o.ID
		if data, err := os.ReadFile(d1.reservation(o.IDBase)); err != nil || string(data) != o.ID {
			t.Fatalf("reservation of %d: %q, %v; want %s", o.IDBase, data, err, o.ID)
		}
	}

	first := holders[idRangeFirst]
	if err := d1.Delete(ctx(t), first); err != nil {
		t.Fatal(err)
	}
	if err := d2.Delete(ctx(t), first); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(d1.reservation(idRangeFirst)); !os.IsNotExist(err) {
		t.Fatalf("the reservation of a deleted sandbox's range is still there (%v)", err)
	}
	delete(holders, idRangeFirst)

	// An older version's state dir, and a delete cut short after the
	// object went: the range of the deleted sandbox is the only free one
	// below the others.
	if err := os.RemoveAll(filepath.Join(d1.cfg.StateDir, idsDir)); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(d1.cfg.StateDir, idsDir), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(d1.reservation(idRangeFirst), []byte(first), 0o600); err != nil {
		t.Fatal(err)
	}
	d3 := newDriverWith(t, "corral.c", opts)
	for range 2 {
		o := newObject(d3)
		if other, ok := holders[o.IDBase]; ok {
			t.Fatalf("a driver new to the state dir gave %s the range of %s (%d)", o.ID, other, o.IDBase)
		}
		holders[o.IDBase] = o.ID
	}
	if holders[idRangeFirst] == "" {
		t.Errorf("the range of a deleted sandbox whose reservation was left is not taken over: %v", holders)
	}
}
