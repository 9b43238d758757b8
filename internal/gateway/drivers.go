package gateway

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/corral-sandbox/corral/internal/config"
	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/driver/docker"
	"github.com/corral-sandbox/corral/internal/driver/fake"
	"github.com/corral-sandbox/corral/internal/driver/native"
)

// The probes of "auto": whether a Docker engine answers (returning its
// driver), and why this host cannot run native sandboxes. Variables, so a
// test can stand in for a host.
var (
	probeDocker     = pingDocker
	nativeSupported = native.Supported
)

// openDriver builds the configured compute driver; "auto" is autoDriver's
// choice.
func openDriver(ctx context.Context, cfg config.Config, home string, log *slog.Logger) (driver.Driver, error) {
	name := cfg.ComputeDriver
	if name == "auto" {
		var d driver.Driver
		var err error
		if name, d, err = autoDriver(ctx, cfg, home, log); err != nil || d != nil {
			return d, err
		}
	}
	switch name {
	case "fake":
		dir := cfg.Drivers.Fake.StateDir
		if dir == "" {
			dir = filepath.Join(home, "fake")
		}
		return fake.New(driver.Config{Label: cfg.SandboxLabel, StateDir: dir})
	case "native":
		if err := nativeSupported(); err != nil {
			return nil, fmt.Errorf("native driver: %w", err)
		}
		dir := filepath.Join(home, "native")
		bin, err := installSupervisor(filepath.Join(dir, "bin"))
		if err != nil {
			return nil, err
		}
		return native.New(driverConfig(cfg, dir),
			native.Options{Supervisor: bin, Hide: []string{home}})
	case "docker":
		d, err := newDocker(cfg, home)
		if err != nil {
			return nil, err
		}
		if err := ping(ctx, d); err != nil {
			// Not fatal: records stay visible with the reason, and the
			// gateway converges once the engine answers.
			log.Error("the Docker engine does not answer yet; sandboxes wait for it", "err", err)
		}
		return d, nil
	}
	return nil, fmt.Errorf("unknown compute driver %q: this build has auto, docker, native and fake", name)
}

// autoDriver picks docker when an engine answers (and returns its driver),
// else native when this host can run it. With neither it is an error that
// says what to install or run: auto never means the fake driver, whose
// sandboxes do not exist.
func autoDriver(ctx context.Context, cfg config.Config, home string, log *slog.Logger) (string, driver.Driver, error) {
	d, derr := probeDocker(ctx, cfg, home)
	if derr == nil {
		log.Info("compute driver: docker (an engine answers)")
		return "docker", d, nil
	}
	nerr := nativeSupported()
	if nerr == nil {
		log.Info("compute driver: native (no Docker engine answers)", "docker", derr)
		return "native", nil, nil
	}
	return "", nil, fmt.Errorf("--driver auto found no compute driver: no Docker engine answers (%v), and this host cannot run native sandboxes (%v). "+
		"Install and start Docker (apt-get install docker.io, then start dockerd, or give --docker-host), "+
		"or run the gateway as root or where unprivileged user namespaces are enabled for --driver native; "+
		"--driver fake simulates sandboxes, for tests only", derr, nerr)
}

// pingDocker returns a Docker driver whose engine answers.
func pingDocker(ctx context.Context, cfg config.Config, home string) (driver.Driver, error) {
	d, err := newDocker(cfg, home)
	if err != nil {
		return nil, err
	}
	if err := ping(ctx, d); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

// defaultImage is the image of sandboxes created without one.
func defaultImage(cfg config.Config, drv driver.Driver) string {
	switch {
	case cfg.DefaultImage != "":
		return cfg.DefaultImage
	case drv.Name() == "native":
		return native.HostImage
	}
	return "busybox:latest"
}

func newDocker(cfg config.Config, home string) (*docker.Driver, error) {
	dir := filepath.Join(home, "docker")
	bin, err := installSupervisor(filepath.Join(dir, "bin"))
	if err != nil {
		return nil, err
	}
	host := cfg.Drivers.Docker.SocketPath
	if host != "" && !strings.Contains(host, "://") {
		host = "unix://" + host
	}
	return docker.New(driverConfig(cfg, dir),
		docker.Options{Host: host, PullPolicy: cfg.ImagePullPolicy, Supervisor: bin})
}

// installSupervisor copies the running binary into dir, so that containers
// mount a file that outlives this process (go run deletes its binary).
func installSupervisor(dir string) (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find the corral binary: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	src, err := os.Open(exe)
	if err != nil {
		return "", fmt.Errorf("read the corral binary: %w", err)
	}
	defer src.Close()
	dst := filepath.Join(dir, "corral")
	tmp, err := os.CreateTemp(dir, ".corral-*")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, src); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Chmod(0o755); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	// rename keeps the file that running containers mount intact
	return dst, os.Rename(tmp.Name(), dst)
}

// driverConfig is what every real driver is built with.
func driverConfig(cfg config.Config, stateDir string) driver.Config {
	logMax, _ := cfg.SandboxLogMaxBytes() // validated with the rest
	return driver.Config{Label: cfg.SandboxLabel, StateDir: stateDir, LogMaxBytes: logMax}
}

// ping asks the engine to answer within a few seconds.
func ping(ctx context.Context, d *docker.Driver) error {
	pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	return d.Ping(pctx)
}
