// Package kubernetes starts a real Kubernetes API server for tests: the
// kube-apiserver of k8s.io/kubernetes's own test server, on an embedded
// etcd (go.etcd.io/etcd/server/v3's embed), in this process. It is a
// module of its own because its build is large (about 5 minutes cold and
// a 180 MB test binary here): a plain `go test ./...` of corral does not
// build it; .ci/run tests it in a step of its own.
package kubernetes

import (
	"context"
	"net"
	"net/url"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	kubeapiservertesting "k8s.io/kubernetes/cmd/kube-apiserver/app/testing"
)

// StartAPIServer starts etcd and an API server on loopback, both stopped
// when the test ends, and returns a client configuration of the server
// (a cluster admin's).
func StartAPIServer(t testing.TB) *rest.Config {
	t.Helper()
	cfg := embed.NewConfig()
	cfg.Dir = t.TempDir()
	client, peer := loopbackURL(t), loopbackURL(t)
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*client}, []url.URL{*client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*peer}, []url.URL{*peer}
	cfg.InitialCluster = cfg.Name + "=" + peer.String()
	cfg.LogLevel = "error"
	etcd, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatalf("etcd: %v", err)
	}
	t.Cleanup(etcd.Close)
	select {
	case <-etcd.Server.ReadyNotify():
	case err := <-etcd.Err():
		t.Fatalf("etcd: %v", err)
	}
	storage := storagebackend.NewDefaultConfig("/corral-test", nil)
	storage.Transport.ServerList = []string{client.String()}
	server := kubeapiservertesting.StartTestServerOrDie(t, nil, nil, storage)
	t.Cleanup(server.TearDownFn)
	// what the controller manager, which does not run here, would make
	cs := kubernetes.NewForConfigOrDie(server.ClientConfig)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: "default"}}
	if _, err := cs.CoreV1().ServiceAccounts("default").Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatalf("the default service account: %v", err)
	}
	return server.ClientConfig
}

// loopbackURL is an http URL of a free loopback port.
func loopbackURL(t testing.TB) *url.URL {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	return &url.URL{Scheme: "http", Host: lis.Addr().String()}
}
