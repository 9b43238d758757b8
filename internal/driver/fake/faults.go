package fake

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/corral-sandbox/corral/internal/atomicfile"
	"github.com/corral-sandbox/corral/internal/driver"
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

// SetFaults replaces the fault rules of the fake driver using stateDir.
func SetFaults(stateDir string, rules ...Rule) error {
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

func (d *Driver) match(op, id, name string, after bool) (Rule, bool, error) {
	rules, err := readFaults(d.cfg.StateDir)
	if err != nil {
		return Rule{}, false, err
	}
	looked := name != "" // the name comes from the objects file only when needed, and once
	for _, r := range rules {
		if r.Op != op || r.After != after {
			continue
		}
		if r.Sandbox != "" && r.Sandbox != id && !looked {
			name, looked = d.nameOf(id), true
		}
		if r.Sandbox == "" || r.Sandbox == id || (name != "" && r.Sandbox == name) {
			return r, true, nil
		}
	}
	return Rule{}, false, nil
}

func (d *Driver) nameOf(id string) string {
	if id == "" {
		return ""
	}
	o, err := d.read(id)
	if err != nil || o == nil {
		return ""
	}
	return o.Labels[driver.LabelName]
}

// inject applies the first rule that matches a call.
func (d *Driver) inject(ctx context.Context, op, id, name string, after bool) error {
	r, ok, err := d.match(op, id, name, after)
	if err != nil || !ok {
		return err
	}
	switch r.Action {
	case "fail":
		msg := r.Error
		if msg == "" {
			msg = "injected failure"
		}
		return fmt.Errorf("fake %s: %s", op, msg)
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
		return d.hold(ctx, op, id, name, after)
	}
	return fmt.Errorf("fake driver: unknown fault action %q", r.Action)
}

// hold blocks until no rule holds the call any more, or ctx ends. While it
// holds, a marker file held/<op>.<id> exists, so tests can wait for it.
func (d *Driver) hold(ctx context.Context, op, id, name string, after bool) error {
	marker := filepath.Join(d.cfg.StateDir, "held", op+"."+id)
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
		r, ok, err := d.match(op, id, name, after)
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
