package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
	"github.com/corral-sandbox/corral/internal/testenv"
)

// debianPython is the Python the SDK is tested with: Debian's, whose
// python3-grpcio, python3-protobuf and python3-pytest it needs.
const debianPython = "/usr/bin/python3"

// The Python SDK's suite (sdk/python/tests, pytest) against a real
// gateway: lifecycle, exec (a timeout too), files, logs, ports, typed
// errors, a pool claim, the remote form over mutual TLS, a member token of
// another tenant, and the README's example as written.
func TestPythonSDK(t *testing.T) {
	testenv.RequireRoot(t)
	if out, err := exec.Command(debianPython, "-c", "import grpc, google.protobuf, pytest").CombinedOutput(); err != nil {
		requirePython(t, "needs Debian's python3-grpcio, python3-protobuf and python3-pytest: "+strings.TrimSpace(string(out)))
	}
	sdk := filepath.Join(testenv.ModuleRoot(), "sdk", "python")
	cmd := exec.Command(debianPython, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests")
	cmd.Dir = sdk
	cmd.Env = append(sdkGateway(t, "python"), "PYTHONPATH="+sdk, "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("pytest: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "16 passed") {
		t.Fatalf("pytest passed, but not its 17 tests:\n%s", out)
	}
}

// sdkGateway starts what an SDK's suite runs against: a native gateway
// with a TLS listener, a client certificate named user, and a warm pool
// "warm" with a ready sandbox (all in tenant "default"), and a member token
// of a tenant "sdk"; it returns the suite's environment, which names them
// (CORRAL_HOME, CORRAL_GATEWAY_URL, CORRAL_CA, CORRAL_CERT, CORRAL_KEY,
// CORRAL_TEST_MEMBER_TOKEN). CORRAL_TOKEN stays unset: the suite acts as
// the local admin or its certificate unless a test gives the token.
func sdkGateway(t *testing.T, user string) []string {
	t.Helper()
	home, certs := t.TempDir(), t.TempDir()
	addr := freePort(t)
	startGateway(t, home, "--driver", "native", "--listen", addr)
	mustCorral(t, home, "gateway", "client-cert", user, "--out", certs)
	mustCorral(t, home, "pool", "create", "warm", "--size", "1")
	testenv.Eventually(t, time.Minute, func() error {
		pools, err := api(t, home).ListPools(t.Context(), &corralv1.ListPoolsRequest{})
		if err != nil || len(pools.Pools) != 1 || pools.Pools[0].Ready != 1 {
			return errors.New("the pool is not ready yet")
		}
		return nil
	})
	mustCorral(t, home, "tenant", "create", "sdk")
	lines := strings.Split(strings.TrimSpace(mustCorral(t, home, "token", "create", "--tenant", "sdk", "--role", "member",
		"--ttl", "1h", "--name", "sdk-"+user)), "\n")
	token := strings.TrimSpace(lines[len(lines)-1])
	if !strings.HasPrefix(token, "corral_tk_") {
		t.Fatalf("corral token create: the last line is not a token: %q", token)
	}
	return append(os.Environ(), "CORRAL_HOME="+home, "CORRAL_GATEWAY_URL=https://"+addr, "CORRAL_CA="+filepath.Join(certs, "ca.crt"),
		"CORRAL_CERT="+filepath.Join(certs, user+".crt"), "CORRAL_KEY="+filepath.Join(certs, user+".key"),
		"CORRAL_TEST_MEMBER_TOKEN="+token)
}

// examples/go/agent, the Go client package's agent, runs as written.
func TestGoAgentExample(t *testing.T) {
	testenv.RequireRoot(t)
	cmd := exec.Command("go", "run", "./examples/go/agent")
	cmd.Dir = testenv.ModuleRoot()
	cmd.Env = sdkGateway(t, "go")
	out, err := cmd.CombinedOutput()
	if err != nil || string(out) != "the answer is 42\n" {
		t.Fatalf("go run ./examples/go/agent: %v\n%s", err, out)
	}
}

// requirePython skips a test that needs Debian's Python packages, or fails
// it under CORRAL_REQUIRE_PYTHON=1 (CI).
func requirePython(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("CORRAL_REQUIRE_PYTHON") == "1" {
		t.Fatalf("CORRAL_REQUIRE_PYTHON=1 but the test %s", why)
	}
	t.Skipf("%s (set CORRAL_REQUIRE_PYTHON=1 to make this a failure)", why)
}

// The TypeScript SDK's suite (sdk/typescript/test, Node's test runner)
// against a real gateway, as the Python one: lifecycle, exec (a timeout
// too), files, logs, ports, typed errors, a pool claim, await using, the
// remote form over mutual TLS, a member token of another tenant, the
// README's example and examples/typescript/agent.mjs.
func TestTypeScriptSDK(t *testing.T) {
	testenv.RequireRoot(t)
	sdk := filepath.Join(testenv.ModuleRoot(), "sdk", "typescript")
	if _, err := exec.LookPath("node"); err != nil {
		requireNode(t, "needs Node.js: "+err.Error())
	}
	for _, built := range []string{"dist/index.js", "test-dist/using.test.js"} {
		if _, err := os.Stat(filepath.Join(sdk, built)); err != nil {
			requireNode(t, "needs the SDK built: run npm ci && npm run build in sdk/typescript")
		}
	}
	cmd := exec.Command("node", "--test", "test/", "test-dist/")
	cmd.Dir = sdk
	cmd.Env = sdkGateway(t, "typescript")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node --test: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "# pass 17") {
		t.Fatalf("node --test passed, but not its 17 tests:\n%s", out)
	}
}
