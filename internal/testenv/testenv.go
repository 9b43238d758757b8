// Package testenv is what tests share to find the environment they need:
// a Docker engine with the test image, root, and a freshly built corral.
// A test that lacks what it needs skips with the reason, except when
// CORRAL_REQUIRE_DOCKER=1 / CORRAL_REQUIRE_ROOT=1 say it must run.
package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/corral-sandbox/corral/internal/testbug"
)

// TestImage is the image Docker tests run: Debian's busybox-static,
// imported with `docker import` by .ci/run (no image can be pulled here).
const TestImage = "corral-test/busybox:latest"

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
	api, err := client.New(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return err
	}
	defer api.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := api.Ping(ctx, client.PingOptions{}); err != nil {
		return fmt.Errorf("no Docker engine answers: %w", err)
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

// TestTag is the build tag of the corral that tests run: it has the test
// switches of internal/testbug (failures the torture harness re-introduces,
// a simulated kernel without Landlock), which a release build lacks.
const TestTag = testbug.Tag

// BuildCorral builds the static corral binary with the test tag into dir
// and returns its path.
func BuildCorral(dir string) (string, error) { return buildCorral(dir, "-tags", TestTag) }

// BuildCorralRelease builds the static corral binary as it ships, without
// the test tag, into dir and returns its path.
func BuildCorralRelease(dir string) (string, error) { return buildCorral(dir) }

func buildCorral(dir string, flags ...string) (string, error) {
	bin := filepath.Join(dir, "corral")
	cmd := exec.Command("go", append(append([]string{"build"}, flags...), "-o", bin, "./cmd/corral")...)
	cmd.Dir = ModuleRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build corral: %v\n%s", err, out)
	}
	return bin, nil
}

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
