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

// openDriver builds the configured compute driver. "auto" picks docker when
// an engine answers, else the best other driver this build has.
func openDriver(ctx context.Context, cfg config.Config, home string, log *slog.Logger) (driver.Driver, error) {
	name := cfg.ComputeDriver
	if name == "auto" {
		d, err := newDocker(cfg, home)
		if err == nil {
			pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			err = d.Ping(pctx)
			cancel()
			if err == nil {
				log.Info("compute driver: docker (an engine answers)")
				return d, nil
			}
			d.Close()
		}
		if nerr := native.Supported(); nerr != nil {
			log.Warn("no Docker engine answers and this host cannot run native sandboxes; using the fake driver, whose sandboxes are simulated", "docker", err, "native", nerr)
			name = "fake"
		} else {
			log.Info("compute driver: native (no Docker engine answers)", "docker", err)
			name = "native"
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
		if err := native.Supported(); err != nil {
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
		pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		if err := d.Ping(pctx); err != nil {
			// Not fatal: records stay visible with the reason, and the
			// gateway converges once the engine answers.
			log.Error("the Docker engine does not answer yet; sandboxes wait for it", "err", err)
		}
		return d, nil
	}
	return nil, fmt.Errorf("unknown compute driver %q: this build has auto, docker, native and fake", name)
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
