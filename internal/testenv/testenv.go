// Package testenv is what tests share to find the environment they need:
// a Docker engine (or another with Docker's API: DockerHostEnv) with the
// test image, root, and a freshly built corral.
// A test that lacks what it needs skips with the reason, except when
// CORRAL_REQUIRE_DOCKER=1 / CORRAL_REQUIRE_ROOT=1 say it must run.
package testenv

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/api/types/system"
	"github.com/moby/moby/client"

	"github.com/corral-sandbox/corral/internal/buildid"
	"github.com/corral-sandbox/corral/internal/testbug"
)

// TestImage is the image Docker tests run: Debian's busybox-static,
// imported with `docker import` by .ci/run (no image can be pulled here).
const TestImage = "corral-test/busybox:latest"

// DockerHostEnv names the variable that points the Docker tests at another
// engine with Docker's API, such as Podman's service
// (unix:///run/podman/podman.sock). Unset, they use DOCKER_HOST or Docker's
// default socket.
const DockerHostEnv = "CORRAL_TEST_DOCKER_HOST"

// DockerHost is the engine address the tests give drivers and gateways:
// $CORRAL_TEST_DOCKER_HOST, or "" for DOCKER_HOST or Docker's default.
func DockerHost() string { return os.Getenv(DockerHostEnv) }

// DockerSocket is the path of the tests' engine socket, for relays.
func DockerSocket() string {
	host := cmp.Or(DockerHost(), os.Getenv("DOCKER_HOST"))
	if path, ok := strings.CutPrefix(host, "unix://"); ok {
		return path
	}
	return "/var/run/docker.sock"
}

// DockerClient is a client of the tests' engine.
func DockerClient() (*client.Client, error) {
	opts := []client.Opt{client.FromEnv, client.WithAPIVersionNegotiation()}
	if host := DockerHost(); host != "" {
		opts = append(opts, client.WithHost(host))
	}
	return client.New(opts...)
}

// DockerCommand is the docker CLI with args, against the tests' engine.
func DockerCommand(args ...string) *exec.Cmd {
	if host := DockerHost(); host != "" {
		args = append([]string{"--host", host}, args...)
	}
	return exec.Command("docker", args...)
}

// Podman tells whether the tests' engine is Podman's Docker-compatible
// service (its version names a "Podman Engine" component).
var Podman = sync.OnceValue(func() bool {
	api, err := DockerClient()
	if err != nil {
		return false
	}
	defer api.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	v, err := api.ServerVersion(ctx, client.ServerVersionOptions{})
	return err == nil && slices.ContainsFunc(v.Components, func(c system.ComponentVersion) bool { return c.Name == "Podman Engine" })
})

// ListedTestImage is the name the tests' engine lists TestImage under:
// Podman names an image imported without a registry localhost/<name>
// (and finds it by its short name too), Docker lists the name as given.
func ListedTestImage() string {
	if Podman() {
		return "localhost/" + TestImage
	}
	return TestImage
}

// PodmanRegistryTLS is why the tests' loopback registry cannot serve
// Podman: Podman pulls over TLS from every registry that its
// registries.conf does not mark insecure (Docker takes 127.0.0.0/8 as
// insecure), its Docker API has no way to ask otherwise, and the test
// registry speaks plain HTTP on a port of its own each time.
const PodmanRegistryTLS = "Podman pulls only over TLS from a registry registries.conf does not mark insecure, and the test registry is plain HTTP on a random loopback port"

// SkipOnPodman skips the test when the tests' engine is Podman, saying
// which difference of Podman's the test cannot hold against.
func SkipOnPodman(t testing.TB, difference string) {
	t.Helper()
	if Podman() {
		t.Skipf("not on Podman: %s", difference)
	}
}

// RequireDocker skips (or, under CORRAL_REQUIRE_DOCKER=1, fails) the test
// unless a Docker engine answers and has TestImage.
func RequireDocker(t testing.TB) {
	t.Helper()
	if err := dockerReady(); err != nil {
		if os.Getenv("CORRAL_REQUIRE_DOCKER") == "1" {
			t.Fatalf("CORRAL_REQUIRE_DOCKER=1 but %v", err)
		}
		t.Skipf("needs Docker: %v (set CORRAL_REQUIRE_DOCKER=1 to make this a failure)", err)
	}
}

func dockerReady() error {
	api, err := DockerClient()
	if err != nil {
		return err
	}
	defer api.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := api.Ping(ctx, client.PingOptions{}); err != nil {
		return fmt.Errorf("no Docker engine answers (%s=%q): %w", DockerHostEnv, DockerHost(), err)
	}
	if _, err := api.ImageInspect(ctx, TestImage); err != nil {
		return fmt.Errorf("the engine lacks the test image %s (.ci/run imports it from busybox-static): %w", TestImage, err)
	}
	return nil
}

// RequireRoot skips (or, under CORRAL_REQUIRE_ROOT=1, fails) the test
// unless it runs as root.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CORRAL_REQUIRE_ROOT") == "1" {
			t.Fatal("CORRAL_REQUIRE_ROOT=1 but the test does not run as root")
		}
		t.Skip("needs root (set CORRAL_REQUIRE_ROOT=1 to make this a failure)")
	}
}

// RequireRunsc skips t (fails it under CORRAL_REQUIRE_ROOT=1) unless it
// runs as root on a host with gVisor's runsc on PATH.
func RequireRunsc(t testing.TB) {
	t.Helper()
	RequireRoot(t)
	if _, err := exec.LookPath("runsc"); err != nil {
		if os.Getenv("CORRAL_REQUIRE_ROOT") == "1" {
			t.Fatalf("CORRAL_REQUIRE_ROOT=1 but gVisor's runsc is missing: %v", err)
		}
		t.Skipf("needs gVisor's runsc (Debian's package runsc): %v", err)
	}
}

// RequireHostPython skips t (fails it under CORRAL_REQUIRE_ROOT=1) unless
// the host has /usr/bin/python3 (Debian's python3), which a sandbox on the
// host's OS directories runs.
func RequireHostPython(t testing.TB) {
	t.Helper()
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		if os.Getenv("CORRAL_REQUIRE_ROOT") == "1" {
			t.Fatalf("CORRAL_REQUIRE_ROOT=1 but Debian's python3 is missing: %v", err)
		}
		t.Skipf("needs /usr/bin/python3 (Debian's python3): %v", err)
	}
}

// TestTag is the build tag of the corral that tests run: it has the test
// switches of internal/testbug (failures the torture harness re-introduces,
// a simulated kernel without Landlock), which a release build lacks.
const TestTag = testbug.Tag

// BuildCorral builds the static corral binary (and corral-supervise beside
// it) with the test tag into dir and returns corral's path.
func BuildCorral(dir string) (string, error) { return buildCorral(dir, "-tags", TestTag) }

// BuildCorralRelease builds the static corral binary (and corral-supervise
// beside it) as it ships, without the test tag, into dir and returns
// corral's path.
func BuildCorralRelease(dir string) (string, error) { return buildCorral(dir) }

// buildCorral builds corral and corral-supervise into dir, stamped as one
// build (the gateway runs corral-supervise only if it is its own build).
func buildCorral(dir string, flags ...string) (string, error) {
	stamp := make([]byte, 8)
	rand.Read(stamp)
	flags = append(flags, buildid.StampFlag(hex.EncodeToString(stamp)), "-o", dir+"/", "./cmd/corral", "./cmd/corral-supervise")
	bin := filepath.Join(dir, "corral")
	cmd := exec.Command("go", append([]string{"build"}, flags...)...)
	cmd.Dir = ModuleRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build corral: %v\n%s", err, out)
	}
	return bin, nil
}

// SupervisorOf is the corral-supervise that BuildCorral built beside bin:
// what the gateway runs inside sandboxes.
func SupervisorOf(bin string) string { return filepath.Join(filepath.Dir(bin), "corral-supervise") }

// ModuleRoot is the directory of corral's go.mod.
func ModuleRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// MainWithCorral is a TestMain that builds corral into a temporary
// directory, sets *bin to it, runs the tests and cleans up.
func MainWithCorral(m *testing.M, bin *string) {
	dir, err := os.MkdirTemp("", "corral-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if *bin, err = BuildCorral(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
