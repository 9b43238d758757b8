package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/internal/caller"
	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

func TestListPagesAndFilters(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, nil)
		ctx := context.Background()
		for i := range 7 {
			team := "a"
			if i%2 == 1 {
				team = "b"
			}
			_, _, err := h.m.Create(ctx, fmt.Sprintf("s%d", i), "", sandbox.Spec{Command: []string{"sleep", "1d"}, Labels: map[string]string{"team": team}})
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Millisecond) // the bubble's clock: each a creation time of its own
		}
		for i := range 7 {
			h.waitPhase(fmt.Sprintf("s%d", i), sandbox.PhaseReady)
		}
		if _, err := h.m.Stop(ctx, "s6"); err != nil {
			t.Fatal(err)
		}
		h.waitPhase("s6", sandbox.PhaseStopped)

		pages := func(opts ListOptions) [][]string {
			var out [][]string
			for range 10 {
				p, err := h.m.ListPage(ctx, opts)
				if err != nil {
					t.Fatal(err)
				}
				var names []string
				for _, sb := range p.Sandboxes {
					names = append(names, sb.Name)
				}
				out = append(out, names)
				if opts.After = p.Next; p.Next == "" {
					return out
				}
			}
			t.Fatal("more than 10 pages")
			return nil
		}
		if got := fmt.Sprint(pages(ListOptions{Limit: 3})); got != "[[s0 s1 s2] [s3 s4 s5] [s6]]" {
			t.Errorf("pages of 3: %s", got)
		}
		if got := fmt.Sprint(pages(ListOptions{Limit: 2, Labels: map[string]string{"team": "a"}})); got != "[[s0 s2] [s4 s6]]" {
			t.Errorf("team=a, pages of 2: %s", got)
		}
		if got := fmt.Sprint(pages(ListOptions{Phase: sandbox.PhaseStopped})); got != "[[s6]]" {
			t.Errorf("phase stopped: %s", got)
		}
		if got := fmt.Sprint(pages(ListOptions{Labels: map[string]string{"team": "c"}})); got != "[[]]" {
			t.Errorf("team=c: %s", got)
		}
		for _, bad := range []ListOptions{{Phase: "sleepy"}, {Limit: -1}, {After: "not a token"}} {
			if _, err := h.m.ListPage(ctx, bad); !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("ListPage(%+v) = %v; want invalid argument", bad, err)
			}
		}
	})
}

// One caller holds at most maxWatchesPerCaller watches; another caller
// still gets one, and an ended watch frees its place.
func TestWatchesAreBoundedPerCaller(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, nil)
		ctx := context.Background()
		var cancels []func()
		defer func() {
			for _, c := range cancels {
				c()
			}
		}()
		for range maxWatchesPerCaller {
			_, cancel, err := h.m.Watch(caller.With(ctx, caller.Caller{Name: "greedy"}))
			if err != nil {
				t.Fatal(err)
			}
			cancels = append(cancels, cancel)
		}
		if _, _, err := h.m.Watch(caller.With(ctx, caller.Caller{Name: "greedy"})); !errors.Is(err, errdefs.ErrResourceExhausted) {
			t.Fatalf("watch %d of one caller: %v; want resource exhausted", maxWatchesPerCaller+1, err)
		}
		_, other, err := h.m.Watch(caller.With(ctx, caller.Caller{Name: "modest"}))
		if err != nil {
			t.Fatalf("another caller's watch: %v", err)
		}
		other()
		cancels[0]()
		_, again, err := h.m.Watch(caller.With(ctx, caller.Caller{Name: "greedy"}))
		if err != nil {
			t.Fatalf("a watch after one ended: %v", err)
		}
		cancels[0] = again
	})
}

// A watch first lists what it selects, says when the list is complete,
// then streams each change of what it selects, nothing else.
func TestWatchSandboxesListsThenStreams(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, nil)
		h.create("seen")
		h.create("other")
		h.waitPhase("seen", sandbox.PhaseReady)
		h.waitPhase("other", sandbox.PhaseReady)
		ctx, cancel := context.WithCancel(context.Background())
		events, err := h.m.WatchSandboxes(ctx, "seen")
		if err != nil {
			t.Fatal(err)
		}
		next := func() Event {
			t.Helper()
			select {
			case ev, ok := <-events:
				if !ok {
					t.Fatal("the watch ended")
				}
				return ev
			case <-time.After(time.Minute):
				t.Fatal("no event")
			}
			return Event{}
		}
		if ev := next(); ev.Type != EventAdded || ev.Sandbox.Name != "seen" {
			t.Fatalf("first event %s %v; want seen ADDED", ev.Type, ev.Sandbox)
		}
		if ev := next(); ev.Type != EventSynced || ev.Sandbox != nil {
			t.Fatalf("second event %s %v; want SYNCED", ev.Type, ev.Sandbox)
		}
		if _, err := h.m.Stop(ctx, "other"); err != nil {
			t.Fatal(err)
		}
		if _, err := h.m.Stop(ctx, "seen"); err != nil {
			t.Fatal(err)
		}
		if ev := next(); ev.Type != EventModified || ev.Sandbox.Name != "seen" {
			t.Fatalf("after two stops: %s of %v; want seen MODIFIED, nothing of other", ev.Type, ev.Sandbox)
		}
		cancel()
		for range events { // closed once ctx ends
		}
	})
}
