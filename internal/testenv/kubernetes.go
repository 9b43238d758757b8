package testenv

import (
	"os"
	"testing"
)

// KubeconfigEnv names the kubeconfig of a cluster for the tests that run
// corral on Kubernetes outside test/kubernetes (which starts its own):
// test/kubernetes's cmd/cluster serves one, and its context names the
// namespace whose Pods a played kubelet runs.
const KubeconfigEnv = "CORRAL_TEST_KUBECONFIG"

// RequireKubernetes returns the kubeconfig of KubeconfigEnv, or skips t
// (fails it under CORRAL_REQUIRE_KUBERNETES=1) when none is given.
func RequireKubernetes(t testing.TB) string {
	t.Helper()
	path := os.Getenv(KubeconfigEnv)
	if path == "" {
		if os.Getenv("CORRAL_REQUIRE_KUBERNETES") == "1" {
			t.Fatalf("CORRAL_REQUIRE_KUBERNETES=1 but %s names no kubeconfig", KubeconfigEnv)
		}
		t.Skipf("needs a Kubernetes API server: set %s to a kubeconfig (go run ./cmd/cluster in test/kubernetes serves one; CORRAL_REQUIRE_KUBERNETES=1 makes this a failure)", KubeconfigEnv)
	}
	return path
}
