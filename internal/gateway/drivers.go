package gateway

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/corral-sandbox/corral/internal/config"
	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/driver/docker"
	"github.com/corral-sandbox/corral/internal/driver/fake"
	"github.com/corral-sandbox/corral/internal/driver/native"
	"github.com/corral-sandbox/corral/internal/driver/registry"
	"github.com/corral-sandbox/corral/internal/images"
)

// The probes of "auto": whether a Docker engine answers (returning its
// driver), and why this host cannot run native sandboxes. Variables, so a
// test can stand in for a host.
var (
	probeDocker     = pingDocker
	nativeSupported = native.Supported
)

// computeDrivers are the drivers of this build, in the order --driver
// auto tries them. They are registered here, in the wiring, rather than
// next to each driver, so that the drivers import neither the gateway's
// settings nor the registry, and this stays the one package that imports
// concrete drivers.
var computeDrivers = registry.New(
	registry.Entry{
		Name: "docker", Open: openDocker, DefaultImage: "busybox:latest", NoEgress: dockerNoEgress,
		Auto: &registry.Probe{
			Check: func(ctx context.Context, env registry.Env) (driver.Driver, error) {
				return probeDocker(ctx, env)
			},
			Chosen:  "an engine answers",
			Missing: "no Docker engine answers",
			Remedy:  "Install and start Docker (apt-get install docker.io, then start dockerd, or give --docker-host)",
		},
	},
	registry.Entry{
		Name: "native", Open: openNative, DefaultImage: native.HostImage, NoEgress: nativeNoEgress,
		Auto: &registry.Probe{
			Check:   func(context.Context, registry.Env) (driver.Driver, error) { return nil, nativeSupported() },
			Chosen:  "no Docker engine answers",
			Missing: "this host cannot run native sandboxes",
			Remedy:  "run the gateway as root or where unprivileged user namespaces are enabled for --driver native",
		},
	},
	// auto never means the fake driver, whose sandboxes do not exist
	registry.Entry{
		Name: "fake", Open: openFake, DefaultImage: "busybox:latest",
		NoEgress: func(config.Config) string { return "the fake driver's sandboxes do not exist" },
		NotAuto:  "simulates sandboxes, for tests only",
	},
)

// nativeNoEgress says why native sandboxes cannot have an egress proxy:
// the gateway enters each one's network namespace to serve it, which
// takes root.
func nativeNoEgress(config.Config) string {
	if os.Geteuid() != 0 {
		return "the gateway does not run as root, and serving a sandbox's proxy in its network namespace needs root"
	}
	return ""
}

// dockerNoEgress is nativeNoEgress for Docker, whose engine's processes
// must also be the gateway's host's.
func dockerNoEgress(cfg config.Config) string {
	if why := nativeNoEgress(cfg); why != "" {
		return why
	}
	if !localEngine(dockerHost(cfg)) {
		return "the Docker engine is not on the gateway's host (" + dockerHost(cfg) + ")"
	}
	return ""
}

// localEngine tells whether a Docker host address is a local socket.
func localEngine(host string) bool {
	if host == "" {
		host = os.Getenv("DOCKER_HOST")
	}
	return host == "" || strings.HasPrefix(host, "unix://")
}

func openFake(_ context.Context, env registry.Env) (driver.Driver, error) {
	dir := env.Config.Drivers.Fake.StateDir
	if dir == "" {
		dir = filepath.Join(env.Home, "fake")
	}
	return fake.New(driver.Config{Label: env.Config.SandboxLabel, Gateway: env.Gateway, StateDir: dir}, fake.Options{Faults: fakeFaults(dir)})
}

func openNative(_ context.Context, env registry.Env) (driver.Driver, error) {
	if err := nativeSupported(); err != nil {
		return nil, fmt.Errorf("native driver: %w", err)
	}
	dir := filepath.Join(env.Home, "native")
	bin, err := installSupervisor(filepath.Join(dir, "bin"), env.Log)
	if err != nil {
		return nil, err
	}
	cache, err := images.Open(filepath.Join(env.Home, "images"), images.Options{DockerHost: dockerHost(env.Config)})
	if err != nil {
		return nil, err
	}
	return native.New(driverConfig(env, dir, nativeNoEgress),
		native.Options{Supervisor: bin, Hide: []string{env.Home}, Images: cache})
}

func openDocker(ctx context.Context, env registry.Env) (driver.Driver, error) {
	d, err := newDocker(env)
	if err != nil {
		return nil, err
	}
	if err := ping(ctx, d); err != nil {
		// Not fatal: records stay visible with the reason, and the
		// gateway converges once the engine answers.
		env.Log.Error("the Docker engine does not answer yet; sandboxes wait for it", "err", err)
	}
	return d, nil
}

// pingDocker returns a Docker driver whose engine answers.
func pingDocker(ctx context.Context, env registry.Env) (driver.Driver, error) {
	d, err := newDocker(env)
	if err != nil {
		return nil, err
	}
	if err := ping(ctx, d); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

func newDocker(env registry.Env) (*docker.Driver, error) {
	cfg := env.Config
	dir := filepath.Join(env.Home, "docker")
	bin, err := installSupervisor(filepath.Join(dir, "bin"), env.Log)
	if err != nil {
		return nil, err
	}
	return docker.New(driverConfig(env, dir, dockerNoEgress),
		docker.Options{Host: dockerHost(cfg), PullPolicy: cfg.ImagePullPolicy, Supervisor: bin,
			GVisorRuntime: cfg.Drivers.Docker.GVisorRuntime})
}

// dockerHost is the configured Docker engine's address ("": DOCKER_HOST or
// the default socket).
func dockerHost(cfg config.Config) string {
	host := cfg.Drivers.Docker.SocketPath
	if host != "" && !strings.Contains(host, "://") {
		host = "unix://" + host
	}
	return host
}

// driverConfig is what every real driver is built with; the egress proxy
// only where the driver can serve it (its entry's NoEgress).
func driverConfig(env registry.Env, stateDir string, noEgress func(config.Config) string) driver.Config {
	logMax, _ := env.Config.SandboxLogMaxBytes() // validated with the rest
	c := driver.Config{Label: env.Config.SandboxLabel, Gateway: env.Gateway, StateDir: stateDir, LogMaxBytes: logMax}
	if noEgress(env.Config) == "" {
		c.Egress = env.Egress
	}
	return c
}

// ping asks the engine to answer within a few seconds.
func ping(ctx context.Context, d *docker.Driver) error {
	pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	return d.Ping(pctx)
}
