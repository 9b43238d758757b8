package gateway

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/corral-sandbox/corral/internal/config"
	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/driver/docker"
	"github.com/corral-sandbox/corral/internal/driver/fake"
	"github.com/corral-sandbox/corral/internal/driver/native"
	"github.com/corral-sandbox/corral/internal/driver/registry"
	"github.com/corral-sandbox/corral/internal/testenv"
)

// host stands in for a machine: what the Docker probe and native's support
// check say. It counts the calls of each.
type host struct {
	docker      driver.Driver // nil: no engine answers
	nativeErr   error
	dockerCalls int
	nativeCalls int
}

// install makes computeDrivers this build's drivers on h: their entries,
// with the Docker probe and native's support check h's.
func (h *host) install(t *testing.T) {
	t.Helper()
	real := computeDrivers
	t.Cleanup(func() { computeDrivers = real })
	d := docker.Entry()
	dockerProbe := *d.Auto
	dockerProbe.Check = func(context.Context, registry.Env) (driver.Driver, error) {
		h.dockerCalls++
		if h.docker == nil {
			return nil, errors.New("docker engine at unix:///nobody.sock: connection refused")
		}
		return h.docker, nil
	}
	d.Auto = &dockerProbe
	n := native.Entry()
	n.Supported = func() error {
		h.nativeCalls++
		return h.nativeErr
	}
	nativeProbe := *n.Auto
	nativeProbe.Check = func(context.Context, registry.Env) (driver.Driver, error) { return nil, n.Supported() }
	n.Auto = &nativeProbe
	computeDrivers = registry.New(d, n, fake.Entry(nil))
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func autoConfig(t *testing.T, drv string) (config.Config, string) {
	cfg := config.Default()
	cfg.ComputeDriver = drv
	return cfg, t.TempDir()
}

func TestAutoWithNoRealDriverRefusesToStart(t *testing.T) {
	h := &host{nativeErr: errors.New("not root, and user namespaces are disabled (user.max_user_namespaces=0)")}
	h.install(t)
	cfg, home := autoConfig(t, "auto")
	d, err := openDriver(context.Background(), cfg, home, quiet())
	if err == nil {
		d.Close()
		t.Fatalf("auto chose the %s driver on a host with no real one", d.Name())
	}
	msg := err.Error()
	for _, want := range []string{
		"--driver auto found no compute driver",
		"connection refused", "user.max_user_namespaces=0", // both reasons
		"apt-get install docker.io", "start dockerd", // what to install and run
		"as root", "unprivileged user namespaces", "--driver native",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("the error lacks %q: %s", want, msg)
		}
	}
	if strings.Contains(msg, "\n") {
		t.Errorf("the error is more than one line: %q", msg)
	}
	if _, err := os.Stat(filepath.Join(home, "fake")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the fake driver's state directory was made: %v", err)
	}
	if h.dockerCalls != 1 || h.nativeCalls != 1 {
		t.Errorf("docker probed %d times, native %d, want once each", h.dockerCalls, h.nativeCalls)
	}
}

func TestAutoPrefersDockerThenNative(t *testing.T) {
	t.Run("an engine answers", func(t *testing.T) {
		engine, err := fake.New(driver.Config{Label: "corral.test", StateDir: t.TempDir()}, fake.Options{})
		if err != nil {
			t.Fatal(err)
		}
		h := &host{docker: engine, nativeErr: errors.New("unsupported")}
		h.install(t)
		cfg, home := autoConfig(t, "auto")
		name, d, err := autoDriver(context.Background(), cfg, home, quiet())
		if err != nil || name != "docker" || d != engine {
			t.Fatalf("auto = %q, %v, %v; want docker and its driver", name, d, err)
		}
		if h.nativeCalls != 0 {
			t.Fatal("native was checked although an engine answers")
		}
	})
	t.Run("no engine, native supported", func(t *testing.T) {
		h := &host{}
		h.install(t)
		cfg, home := autoConfig(t, "auto")
		name, d, err := autoDriver(context.Background(), cfg, home, quiet())
		if err != nil || name != "native" || d != nil {
			t.Fatalf("auto = %q, %v, %v; want native, built by openDriver", name, d, err)
		}
	})
}

func TestExplicitDrivers(t *testing.T) {
	h := &host{nativeErr: errors.New("not root, and user namespaces are disabled")}
	h.install(t)
	t.Run("fake stays available", func(t *testing.T) {
		cfg, home := autoConfig(t, "fake")
		d, err := openDriver(context.Background(), cfg, home, quiet())
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		if d.Name() != "fake" {
			t.Fatalf("driver %s, want fake", d.Name())
		}
	})
	t.Run("native where unsupported", func(t *testing.T) {
		cfg, home := autoConfig(t, "native")
		if d, err := openDriver(context.Background(), cfg, home, quiet()); err == nil || !strings.Contains(err.Error(), "native driver: not root") {
			if d != nil {
				d.Close()
			}
			t.Fatalf("err = %v", err)
		}
	})
	if h.dockerCalls != 0 {
		t.Fatalf("explicit drivers probed docker %d times", h.dockerCalls)
	}
}

// openDriver is the driver the registry opens for cfg.
func openDriver(ctx context.Context, cfg config.Config, home string, log *slog.Logger) (driver.Driver, error) {
	o, err := computeDrivers.Open(ctx, testEnv(cfg, home, log))
	return o.Driver, err
}

// testEnv is what the gateway gives a driver, on home.
func testEnv(cfg config.Config, home string, log *slog.Logger) registry.Env {
	return registry.Env{Config: cfg, Home: home, Log: log,
		Supervisor: func(dir string) (string, error) { return installSupervisor(dir, log) }}
}

// autoDriver is what auto chooses, by name, with the driver its probe
// built (Docker's), if any.
func autoDriver(ctx context.Context, cfg config.Config, home string, log *slog.Logger) (string, driver.Driver, error) {
	e, d, err := computeDrivers.Choose(ctx, testEnv(cfg, home, log))
	return e.Name, d, err
}

// The supervisor must be static: a cgo build is refused, saying how to
// build it; the static build the tests run passes.
func TestRequireStatic(t *testing.T) {
	bin, err := testenv.BuildCorralRelease(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := requireStatic(bin); err != nil {
		t.Errorf("the static corral binary: %v", err)
	}
	dynamic := "/bin/ls" // Debian's coreutils: dynamically linked
	if err := requireStatic(dynamic); err == nil || !strings.Contains(err.Error(), "CGO_ENABLED=0") {
		t.Errorf("requireStatic(%s) = %v; want it refused, saying how to build a static binary", dynamic, err)
	}
}

// The gateway runs corral-supervise only when it is its own build: not
// when it is missing, dynamically linked, or of another build.
func TestSupervisorHelperIsTheSameBuild(t *testing.T) {
	bin, err := testenv.BuildCorralRelease(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	helper := testenv.SupervisorOf(bin)
	out, err := exec.Command(helper, "supervise", "identity").Output()
	if err != nil {
		t.Fatal(err)
	}
	id := strings.TrimSpace(string(out))
	if !strings.HasPrefix(id, "stamp ") {
		t.Fatalf("identity %q: want the stamp testenv gave the build", id)
	}
	if out, err := exec.Command(bin, "supervise", "identity").Output(); err != nil || strings.TrimSpace(string(out)) != id {
		t.Fatalf("corral of the same build: identity %q, %v; want %q", out, err, id)
	}
	if why := sameBuild(helper, id); why != "" {
		t.Errorf("the same build refused: %s", why)
	}
	if why := sameBuild(helper, id+"-other"); !strings.Contains(why, "another build") {
		t.Errorf("another build: %q; want it refused as another build", why)
	}
	if why := sameBuild(helper, ""); !strings.Contains(why, "modified or unversioned") {
		t.Errorf("a gateway of no identity: %q; want it refused, saying why", why)
	}
	if why := sameBuild(filepath.Join(t.TempDir(), "corral-supervise"), id); !strings.Contains(why, "no corral-supervise") {
		t.Errorf("a missing helper: %q", why)
	}
	dynamic := filepath.Join(t.TempDir(), "corral-supervise")
	if data, err := os.ReadFile("/bin/ls"); err != nil || os.WriteFile(dynamic, data, 0o755) != nil {
		t.Fatal(err)
	}
	if why := sameBuild(dynamic, id); !strings.Contains(why, "dynamically linked") {
		t.Errorf("a dynamically linked helper: %q", why)
	}
}
