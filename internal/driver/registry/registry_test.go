package registry

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/corral-sandbox/corral/internal/config"
	"github.com/corral-sandbox/corral/internal/driver"
)

// stub is a driver that only has a name.
type stub struct {
	driver.Driver
	name string
}

func (s stub) Name() string { return s.name }
func (s stub) Close() error { return nil }

// world records what the entries of a test registry were asked.
type world struct {
	calls []string
	log   bytes.Buffer
}

// entry is a driver whose probe (when probe is not nil) returns probeErr
// and, with built, a driver of its own.
func (w *world) entry(name string, probe bool, probeErr error, built bool) Entry {
	e := Entry{
		Name:         name,
		DefaultImage: name + "-image",
		Open: func(_ context.Context, env Env) (driver.Driver, error) {
			w.calls = append(w.calls, "open "+name+" "+env.Home)
			return stub{name: name}, nil
		},
	}
	if probe {
		e.Auto = &Probe{
			Check: func(context.Context, Env) (driver.Driver, error) {
				w.calls = append(w.calls, "probe "+name)
				if probeErr != nil || !built {
					return nil, probeErr
				}
				return stub{name: name + " (probed)"}, nil
			},
			Chosen: name + " is here", Missing: "no " + name, Remedy: "install " + name,
		}
	}
	return e
}

func (w *world) env(driverName string) Env {
	cfg := config.Default()
	cfg.ComputeDriver = driverName
	return Env{Config: cfg, Home: "/home", Log: slog.New(slog.NewTextHandler(&w.log, nil))}
}

func TestOpenByName(t *testing.T) {
	w := &world{}
	r := New(w.entry("a", true, nil, true), w.entry("b", false, nil, false))
	o, err := r.Open(context.Background(), w.env("b"))
	e, d := o.Entry, o.Driver
	if err != nil || e.Name != "b" || d.Name() != "b" {
		t.Fatalf("open b = %q, %v, %v", e.Name, d, err)
	}
	if got := strings.Join(w.calls, "; "); got != "open b /home" {
		t.Fatalf("calls: %s (an explicit driver is not probed)", got)
	}
	_, err = r.Open(context.Background(), w.env("c"))
	if err == nil || err.Error() != `unknown compute driver "c": this build has auto, a and b` {
		t.Fatalf("open c = %v", err)
	}
	if got := r.Names(); strings.Join(got, ",") != "a,b" {
		t.Fatalf("names %v", got)
	}
}

func TestChooseTakesTheFirstProbeThatPasses(t *testing.T) {
	t.Run("the probe's own driver", func(t *testing.T) {
		w := &world{}
		r := New(w.entry("a", true, nil, true), w.entry("b", true, nil, false))
		o, err := r.Open(context.Background(), w.env(Auto))
		e, d := o.Entry, o.Driver
		if err != nil || e.Name != "a" || d.Name() != "a (probed)" {
			t.Fatalf("auto = %q, %v, %v", e.Name, d, err)
		}
		if got := strings.Join(w.calls, "; "); got != "probe a" {
			t.Fatalf("calls: %s (want b never probed, a never opened again)", got)
		}
		if !strings.Contains(w.log.String(), `msg="compute driver: a (a is here)"`) {
			t.Fatalf("log: %s", w.log.String())
		}
	})
	t.Run("a probe that builds nothing, after one that fails", func(t *testing.T) {
		w := &world{}
		r := New(w.entry("a", true, errors.New("a is down"), false), w.entry("plain", false, nil, false), w.entry("b", true, nil, false))
		o, err := r.Open(context.Background(), w.env(Auto))
		e, d := o.Entry, o.Driver
		if err != nil || e.Name != "b" || d.Name() != "b" {
			t.Fatalf("auto = %q, %v, %v", e.Name, d, err)
		}
		if got := strings.Join(w.calls, "; "); got != "probe a; probe b; open b /home" {
			t.Fatalf("calls: %s", got)
		}
		if log := w.log.String(); !strings.Contains(log, `msg="compute driver: b (b is here)" a="a is down"`) {
			t.Fatalf("the log does not say why a was passed over: %s", log)
		}
	})
}

func TestChooseWithNothingSaysWhatToDo(t *testing.T) {
	w := &world{}
	plain := w.entry("plain", false, nil, false)
	plain.NotAuto = "is for tests only"
	r := New(w.entry("a", true, errors.New("a is down"), false), plain, w.entry("b", true, errors.New("b is off"), false))
	o, err := r.Open(context.Background(), w.env(Auto))
	e, d := o.Entry, o.Driver
	if err == nil || d != nil || e.Name != "" {
		t.Fatalf("auto = %q, %v, %v; want an error", e.Name, d, err)
	}
	want := "--driver auto found no compute driver: no a (a is down), and no b (b is off). install a, or install b; --driver plain is for tests only"
	if err.Error() != want {
		t.Fatalf("error\n got %s\nwant %s", err, want)
	}
	if got := strings.Join(w.calls, "; "); got != "probe a; probe b" {
		t.Fatalf("calls: %s (a driver without a probe is never opened by auto)", got)
	}
}

func TestImage(t *testing.T) {
	e := Entry{Name: "a", DefaultImage: "a-image"}
	cfg := config.Default()
	if got := e.Image(cfg); got != "a-image" {
		t.Fatalf("image %q, want the driver's default", got)
	}
	cfg.DefaultImage = "mine:1"
	if got := e.Image(cfg); got != "mine:1" {
		t.Fatalf("image %q, want the settings' default_image", got)
	}
}

func TestRegisterRefusesMistakes(t *testing.T) {
	w := &world{}
	open := w.entry("a", false, nil, false).Open
	for name, entries := range map[string][]Entry{
		"twice":          {{Name: "a", Open: open}, {Name: "a", Open: open}},
		"no name":        {{Open: open}},
		"named auto":     {{Name: Auto, Open: open}},
		"no open":        {{Name: "a"}},
		"probe no check": {{Name: "a", Open: open, Auto: &Probe{}}},
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("no panic")
				}
			}()
			New(entries...)
		})
	}
}

// A driver's settings are its [drivers.NAME] table over its defaults; a
// key it does not take, a table of no driver, or a driver that takes none
// given one, is refused, naming it.
func TestDriverSettings(t *testing.T) {
	type settings struct {
		Host string `toml:"host"`
		Mode string `toml:"mode"`
	}
	w := &world{}
	a := w.entry("a", false, nil, false)
	a.Settings = func() any { return &settings{Mode: "default"} }
	var got *settings
	open := a.Open
	a.Open = func(ctx context.Context, env Env) (driver.Driver, error) {
		got = env.Settings.(*settings)
		return open(ctx, env)
	}
	r := New(a, w.entry("b", false, nil, false))
	env := w.env("a")
	env.Config.Drivers.Set("a", "host", "unix:///x.sock")
	o, err := r.Open(context.Background(), env)
	if err != nil || got == nil || *got != (settings{Host: "unix:///x.sock", Mode: "default"}) || o.Env.Settings != any(got) {
		t.Fatalf("open a with settings: %+v, %v", got, err)
	}
	for _, c := range []struct {
		driver, key, want string
	}{
		{"a", "hots", `unknown key "drivers.a.hots" (this build's drivers are a and b)`},
		{"b", "x", `unknown key "drivers.b.x"`},
		{"c", "x", `unknown key "drivers.c.x"`},
	} {
		cfg := config.Default()
		cfg.Drivers.Set(c.driver, c.key, "v")
		if err := r.Check(cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Check of [drivers.%s] %s: %v; want %q", c.driver, c.key, err, c.want)
		}
	}
	if err := r.Check(config.Default()); err != nil {
		t.Errorf("Check of no tables: %v", err)
	}
	bad := config.Default()
	bad.Drivers.Set("a", "host", 5)
	if err := r.Check(bad); err == nil || !strings.Contains(err.Error(), "[drivers.a]") {
		t.Errorf("Check of a number for a string: %v; want it refused, naming the table", err)
	}
	tables := config.Drivers{}
	tables.Set("c", "x", "v")
	tables.Set("a", "hots", "v")
	tables.Set("a", "host", "v")
	if got := strings.Join(r.UnknownKeys(tables), " "); got != "drivers.a.hots drivers.c.x" {
		t.Errorf("UnknownKeys: %s", got)
	}
}
