package gateway

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/corral-sandbox/corral/internal/config"
	"github.com/corral-sandbox/corral/internal/driver/native"
	"github.com/corral-sandbox/corral/internal/driver/registry"
)

// The drivers of this build, their order for auto and their defaults.
func TestComputeDriversOfThisBuild(t *testing.T) {
	if got := strings.Join(computeDrivers.Names(), ","); got != "docker,native,kubernetes,fake" {
		t.Fatalf("drivers %s, want docker,native,kubernetes,fake (the order auto tries them)", got)
	}
	cfg, _ := autoConfig(t, "auto")
	for name, want := range map[string]struct {
		auto  bool
		image string
	}{
		"docker": {true, "busybox:latest"},
		"native": {true, native.HostImage},
		"fake":   {false, "busybox:latest"},
	} {
		e, ok := computeDrivers.Lookup(name)
		if !ok {
			t.Fatalf("no %s driver", name)
		}
		if (e.Auto != nil) != want.auto {
			t.Errorf("%s: auto may choose it = %v, want %v", name, e.Auto != nil, want.auto)
		}
		if got := e.Image(cfg); got != want.image {
			t.Errorf("%s: default image %q, want %q", name, got, want.image)
		}
	}
}

// auto's refusal is word for word what it was before the registry.
func TestAutoRefusalWordForWord(t *testing.T) {
	h := &host{nativeErr: errors.New("not root")}
	h.install(t)
	cfg, home := autoConfig(t, "auto")
	_, err := openDriver(context.Background(), cfg, home, quiet())
	want := "--driver auto found no compute driver: no Docker engine answers (docker engine at unix:///nobody.sock: connection refused), " +
		"and this host cannot run native sandboxes (not root). " +
		"Install and start Docker (apt-get install docker.io, then start dockerd, or give --docker-host), " +
		"or run the gateway as root or where unprivileged user namespaces are enabled for --driver native; " +
		"--driver fake simulates sandboxes, for tests only"
	if err == nil || err.Error() != want {
		t.Fatalf("error\n got %v\nwant %s", err, want)
	}
}

func TestAutoLogsItsChoice(t *testing.T) {
	h := &host{}
	h.install(t)
	var buf bytes.Buffer
	cfg, home := autoConfig(t, "auto")
	if name, _, err := autoDriver(context.Background(), cfg, home, slog.New(slog.NewTextHandler(&buf, nil))); err != nil || name != "native" {
		t.Fatalf("auto = %q, %v", name, err)
	}
	if want := `msg="compute driver: native (no Docker engine answers)" docker="docker engine at unix:///nobody.sock: connection refused"`; !strings.Contains(buf.String(), want) {
		t.Fatalf("log %s\nwant %s", buf.String(), want)
	}
}

// The default image of sandboxes comes from the chosen driver's entry,
// unless the settings name one.
func TestOpenComputeGivesTheEntry(t *testing.T) {
	cfg, home := autoConfig(t, "fake")
	o, err := computeDrivers.Open(context.Background(), testEnv(cfg, home, quiet()))
	if err != nil {
		t.Fatal(err)
	}
	e, d := o.Entry, o.Driver
	defer d.Close()
	if e.Name != "fake" || d.Name() != "fake" || e.Image(cfg) != "busybox:latest" {
		t.Fatalf("entry %q (image %q), driver %s", e.Name, e.Image(cfg), d.Name())
	}
	cfg.DefaultImage = "alpine:3"
	if got := e.Image(cfg); got != "alpine:3" {
		t.Fatalf("image %q, want default_image", got)
	}

	cfg.ComputeDriver = "lxc"
	if _, err := computeDrivers.Open(context.Background(), testEnv(cfg, home, quiet())); err == nil ||
		err.Error() != `unknown compute driver "lxc": this build has auto, docker, native, kubernetes and fake` {
		t.Fatalf("err = %v", err)
	}
	cfg.ComputeDriver = "kubernetes"
	if _, err := computeDrivers.Open(context.Background(), testEnv(cfg, home, quiet())); err == nil ||
		!strings.Contains(err.Error(), "no supervisor_image configured") {
		t.Fatalf("kubernetes without a supervisor image: err = %v", err)
	}
}

// Each driver's entry says whether its sandboxes can have an egress proxy
// with the settings, and why not.
func TestEachDriverSaysWhetherItServesEgress(t *testing.T) {
	cfg, _ := autoConfig(t, "auto")
	remote := config.Default()
	remote.Drivers.Set("docker", "socket_path", "tcp://10.0.0.1:2375")
	asRoot := func(why string) string { // what a gateway that is not root says first
		if os.Geteuid() != 0 {
			return "does not run as root"
		}
		return why
	}
	for _, c := range []struct {
		driver string
		cfg    config.Config
		why    string // "": served
	}{
		{"fake", cfg, "do not exist"},
		{"native", cfg, asRoot("")},
		{"docker", cfg, asRoot("")},
		{"docker", remote, asRoot("not on the gateway's host")},
	} {
		e, _ := computeDrivers.Lookup(c.driver)
		env, err := e.Env(registry.Env{Config: c.cfg})
		if err != nil {
			t.Fatal(err)
		}
		if why := e.WhyNoEgress(env); (why == "") != (c.why == "") || !strings.Contains(why, c.why) {
			t.Errorf("%s (docker settings %v): %q; want %q", c.driver, c.cfg.Drivers["docker"], why, c.why)
		}
	}
}
