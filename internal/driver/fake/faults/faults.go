// Package faults is fault injection for the fake driver, for tests and
// test builds only (a gateway built with -tags corraltest wires it; the
// release build does not link it): rules read from a file of the fake's
// state directory hold, delay or fail any call, from the test's process
// or from outside it.
package faults

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/corral-sandbox/corral/internal/atomicfile"
	"github.com/corral-sandbox/corral/internal/driver/fake"
)

// Rule is one fault: while it is in the faults file, every matching call is
// held, delayed or failed.
type Rule struct {
	// Op is the call: create, start, stop, delete, inspect, list or exec.
	Op string `json:"op"`
	// Sandbox limits the rule to one sandbox id or name; empty matches all.
	Sandbox string `json:"sandbox,omitempty"`
	// Action is hold (until the rule is removed or the call's context
	// ends), delay (by Delay) or fail (with Error).
	Action string `json:"action"`
	Delay  string `json:"delay,omitempty"`
	Error  string `json:"error,omitempty"`
	// After applies the rule once the call has taken effect, as a lost
	// reply would.
	After bool `json:"after,omitempty"`
}

// FaultsFile is the name of the file that holds the rules in the state dir.
const FaultsFile = "faults.json"

// Set replaces the fault rules of the fake driver using stateDir.
func Set(stateDir string, rules ...Rule) error {
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return err
	}
	data, err := json.Marshal(rules)
	if err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(stateDir, FaultsFile), data, 0o600)
}

func readFaults(stateDir string) ([]Rule, error) {
	data, err := os.ReadFile(filepath.Join(stateDir, FaultsFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var rules []Rule
	if err := json.Unmarshal(data, &rules); err != nil {
		return nil, fmt.Errorf("fake driver: %s: %w", FaultsFile, err)
	}
	return rules, nil
}

// File is the fault rules of the fake driver using stateDir, as a
// fake.Faults: each call reads them again, so a test changes them with Set
// while the driver runs.
func File(stateDir string) fake.Faults { return file(stateDir) }

type file string

func (f file) match(c fake.Call) (Rule, bool, error) {
	rules, err := readFaults(string(f))
	if err != nil {
		return Rule{}, false, err
	}
	name, looked := "", false // the name is read only when needed, and once
	for _, r := range rules {
		if r.Op != c.Op || r.After != c.After {
			continue
		}
		if r.Sandbox != "" && r.Sandbox != c.ID && !looked {
			name, looked = c.Name(), true
		}
		if r.Sandbox == "" || r.Sandbox == c.ID || (name != "" && r.Sandbox == name) {
			return r, true, nil
		}
	}
	return Rule{}, false, nil
}

// Inject implements fake.Faults: it applies the first rule that matches
// the call.
func (f file) Inject(ctx context.Context, c fake.Call) error {
	r, ok, err := f.match(c)
	if err != nil || !ok {
		return err
	}
	switch r.Action {
	case "fail":
		msg := r.Error
		if msg == "" {
			msg = "injected failure"
		}
		return fmt.Errorf("fake %s: %s", c.Op, msg)
	case "delay":
		delay, err := time.ParseDuration(r.Delay)
		if err != nil {
			return fmt.Errorf("fake driver: rule delay %q: %w", r.Delay, err)
		}
		select {
		case <-time.After(delay):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	case "hold":
		return f.hold(ctx, c)
	}
	return fmt.Errorf("fake driver: unknown fault action %q", r.Action)
}

// hold blocks until no rule holds the call any more, or ctx ends. While it
// holds, a marker file held/<op>.<id> exists, so tests can wait for it.
func (f file) hold(ctx context.Context, c fake.Call) error {
	dir := filepath.Join(string(f), "held")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	marker := filepath.Join(dir, c.Op+"."+c.ID)
	if err := os.WriteFile(marker, nil, 0o600); err != nil {
		return err
	}
	defer os.Remove(marker)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		r, ok, err := f.match(c)
		if err != nil {
			return err
		}
		if !ok || r.Action != "hold" {
			return nil
		}
	}
}

// WaitHeld waits until a call op on sandbox id is being held.
func WaitHeld(ctx context.Context, stateDir, op, id string) error {
	marker := filepath.Join(stateDir, "held", op+"."+id)
	for {
		if _, err := os.Stat(marker); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no %s call held for sandbox %s: %w", op, id, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}
