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
	return requireSetting(t, KubeconfigEnv, "CORRAL_REQUIRE_KUBERNETES", "a Kubernetes API server: set it to a kubeconfig (go run ./cmd/cluster in test/kubernetes serves one)")
}

// KubeletKubeconfigEnv names the kubeconfig of a cluster whose node is a
// real kubelet and runtime (.ci/kubelet), for the tests of what runs
// inside Pods: the supervisor, execs, logs, egress from a Pod.
const KubeletKubeconfigEnv = "CORRAL_TEST_KUBELET_KUBECONFIG"

// RequireKubelet returns the kubeconfig of KubeletKubeconfigEnv, or skips
// t (fails it under CORRAL_REQUIRE_KUBELET=1) when none is given.
func RequireKubelet(t testing.TB) string {
	t.Helper()
	return requireSetting(t, KubeletKubeconfigEnv, "CORRAL_REQUIRE_KUBELET", "a cluster with a real kubelet: set it to its kubeconfig (.ci/kubelet starts one)")
}

// requireSetting returns the value of the environment variable name, or
// skips t, saying it needs what, when it is unset; under require=1 that
// is a failure instead.
func requireSetting(t testing.TB, name, require, what string) string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		if os.Getenv(require) == "1" {
			t.Fatalf("%s=1 but %s is not set", require, name)
		}
		t.Skipf("needs %s: %s (%s=1 makes this a failure)", what, name, require)
	}
	return v
}
