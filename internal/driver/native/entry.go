package native

import (
	"context"
	"os"
	"path/filepath"

	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/driver/registry"
	"github.com/corral-sandbox/corral/internal/images"
)

// Entry is the native driver's entry in a gateway's registry. auto
// chooses it when no Docker engine answers and this host can run it.
func Entry() registry.Entry {
	return registry.Entry{
		Name: "native", DefaultImage: HostImage,
		Supported: Supported,
		Open:      open,
		NoEgress:  noEgress,
		Auto: &registry.Probe{
			Check:   func(context.Context, registry.Env) (driver.Driver, error) { return nil, Supported() },
			Chosen:  "no Docker engine answers",
			Missing: "this host cannot run native sandboxes",
			Remedy:  "run the gateway as root or where unprivileged user namespaces are enabled for --driver native",
		},
	}
}

// noEgress says why sandboxes cannot have an egress proxy: the gateway
// enters each one's network namespace to serve it, which takes root.
func noEgress(registry.Env) string {
	if os.Geteuid() != 0 {
		return "the gateway does not run as root, and serving a sandbox's proxy in its network namespace needs root"
	}
	return ""
}

func open(_ context.Context, env registry.Env) (driver.Driver, error) {
	dir := filepath.Join(env.Home, "native")
	bin, err := env.Supervisor(filepath.Join(dir, "bin"))
	if err != nil {
		return nil, err
	}
	cache, err := images.Open(filepath.Join(env.Home, "images"), images.Options{DockerHost: engineHost(env)})
	if err != nil {
		return nil, err
	}
	return New(env.DriverConfig(dir, noEgress(env)), Options{Supervisor: bin, Hide: []string{env.Home}, Images: cache})
}

// engineHost is the Docker engine that images named as the engine's come
// from: the Docker driver's ([drivers.docker] socket_path, --docker-host).
func engineHost(env registry.Env) string {
	host, _ := env.Config.Drivers["docker"]["socket_path"].(string)
	return images.EngineAddress(host)
}
