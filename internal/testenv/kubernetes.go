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

// KubeletKubeconfigEnv names the kubeconfig of a cluster whose node is a
// real kubelet and runtime (.ci/kubelet), for the tests of what runs
// inside Pods: the supervisor, execs, logs, egress from a Pod.
const KubeletKubeconfigEnv = "CORRAL_TEST_KUBELET_KUBECONFIG"

// RequireKubelet returns the kubeconfig of KubeletKubeconfigEnv, or skips
// t (fails it under CORRAL_REQUIRE_KUBELET=1) when none is given.
func RequireKubelet(t testing.TB) string {
	t.Helper()
	path := os.Getenv(KubeletKubeconfigEnv)
	if path == "" {
		if os.Getenv("CORRAL_REQUIRE_KUBELET") == "1" {
			t.Fatalf("CORRAL_REQUIRE_KUBELET=1 but %s names no kubeconfig", KubeletKubeconfigEnv)
		}
		t.Skipf("needs a cluster with a real kubelet: set %s to its kubeconfig (.ci/kubelet starts one; CORRAL_REQUIRE_KUBELET=1 makes this a failure)", KubeletKubeconfigEnv)
	}
	return path
}
