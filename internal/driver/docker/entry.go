package docker

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/driver/registry"
	"github.com/corral-sandbox/corral/internal/images"
)

// Settings are the [drivers.docker] table of the gateway's config.
type Settings struct {
	// SocketPath is the engine's address (unix:///var/run/docker.sock, a
	// bare path, or tcp://); "" is $DOCKER_HOST or the default socket.
	SocketPath string `toml:"socket_path"`
	// GVisorRuntime is the engine's name of its runsc runtime, which
	// sandboxes with isolation: gvisor run under; default "runsc".
	GVisorRuntime string `toml:"gvisor_runtime"`
}

// Host is the engine's address as the Docker client takes it ("":
// DOCKER_HOST or the default socket).
func (s *Settings) Host() string { return images.EngineAddress(s.SocketPath) }

// Entry is the Docker driver's entry in a gateway's registry. auto
// chooses it when an engine answers.
func Entry() registry.Entry {
	return registry.Entry{
		Name: "docker", DefaultImage: "busybox:latest",
		Settings: func() any { return &Settings{} },
		Flags: []registry.Flag{
			{Name: "docker-host", Key: "socket_path", Usage: "Docker Engine address, unix:///var/run/docker.sock (default $DOCKER_HOST)"},
			{Name: "docker-gvisor-runtime", Key: "gvisor_runtime", Usage: "the engine's name of its runsc runtime, for isolation: gvisor (default runsc)"},
		},
		Open:     open,
		NoEgress: noEgress,
		Auto: &registry.Probe{
			Check:   answering,
			Chosen:  "an engine answers",
			Missing: "no Docker engine answers",
			Remedy:  "Install and start Docker (apt-get install docker.io, then start dockerd, or give --docker-host)",
		},
	}
}

// noEgress says why sandboxes cannot have an egress proxy: the gateway
// enters each one's network namespace to serve it, which takes root and
// an engine whose processes are the gateway's host's.
func noEgress(env registry.Env) string {
	if os.Geteuid() != 0 {
		return "the gateway does not run as root, and serving a sandbox's proxy in its network namespace needs root"
	}
	if host := env.Settings.(*Settings).Host(); !localEngine(host) {
		return "the Docker engine is not on the gateway's host (" + host + ")"
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

func open(ctx context.Context, env registry.Env) (driver.Driver, error) {
	d, err := build(env)
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

// answering is auto's probe: a Docker driver whose engine answers.
func answering(ctx context.Context, env registry.Env) (driver.Driver, error) {
	d, err := build(env)
	if err != nil {
		return nil, err
	}
	if err := ping(ctx, d); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

func build(env registry.Env) (*Driver, error) {
	s := env.Settings.(*Settings)
	dir := filepath.Join(env.Home, "docker")
	bin, err := env.Supervisor(filepath.Join(dir, "bin"))
	if err != nil {
		return nil, err
	}
	return New(env.DriverConfig(dir, noEgress(env)),
		Options{Host: s.Host(), PullPolicy: env.Config.ImagePullPolicy, Supervisor: bin, GVisorRuntime: s.GVisorRuntime})
}

// ping asks the engine to answer within a few seconds.
func ping(ctx context.Context, d *Driver) error {
	pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	return d.Ping(pctx)
}
