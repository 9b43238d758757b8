// Package kubernetes starts a real Kubernetes API server for tests: the
// kube-apiserver of k8s.io/kubernetes's own test server, on an embedded
// etcd (go.etcd.io/etcd/server/v3's embed), in this process. It is a
// module of its own because its build is large (about 5 minutes cold and
// a 180 MB test binary here): a plain `go test ./...` of corral does not
// build it; .ci/run tests it in a step of its own. cmd/cluster serves the
// same cluster as a process, for the tests of corral's own module (the
// torture harness) that run on Kubernetes.
package kubernetes

import (
	"cmp"
	"context"
	"net"
	"net/url"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	kubeapiservertesting "k8s.io/kubernetes/cmd/kube-apiserver/app/testing"
	"k8s.io/kubernetes/test/utils/ktesting"
)

// StartAPIServer starts etcd and an API server on loopback, both stopped
// when the test ends, and returns a client configuration of the server
// (a cluster admin's).
func StartAPIServer(t ktesting.TB) *rest.Config {
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
	// a real kubelet (cmd/cluster -kubelet=false) is reached at its node's
	// IP, as no name of it resolves here
	flags := []string{"--kubelet-preferred-address-types=InternalIP"}
	server, err := kubeapiservertesting.StartTestServer(t, nil, flags, storage)
	if err != nil {
		t.Fatalf("the API server: %v", err)
	}
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
func loopbackURL(t ktesting.TB) *url.URL {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	return &url.URL{Scheme: "http", Host: lis.Addr().String()}
}

// StartNamespace makes a namespace under Pod Security baseline, with its
// default service account, and the RuntimeClass of runsc (gvisorClass).
func StartNamespace(t ktesting.TB, rc *rest.Config, name string) kubernetes.Interface {
	t.Helper()
	api := kubernetes.NewForConfigOrDie(rc)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := api.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name,
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "baseline"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := api.CoreV1().ServiceAccounts(name).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err := api.NodeV1().RuntimeClasses().Create(ctx, &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: GVisorClass}, Handler: "runsc"}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	return api
}

// GVisorClass is the RuntimeClass of runsc that StartNamespace makes.
const GVisorClass = "gvisor"

// WriteKubeconfig writes a kubeconfig of rc's credentials for server
// (rc.Host: "") to path, in namespace ("": the default).
func WriteKubeconfig(rc *rest.Config, server, namespace, path string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["test"] = &clientcmdapi.Cluster{Server: cmp.Or(server, rc.Host), CertificateAuthority: rc.CAFile, CertificateAuthorityData: rc.CAData,
		InsecureSkipTLSVerify: rc.Insecure, TLSServerName: rc.ServerName}
	cfg.AuthInfos["test"] = &clientcmdapi.AuthInfo{Token: rc.BearerToken, TokenFile: rc.BearerTokenFile,
		ClientCertificate: rc.CertFile, ClientKey: rc.KeyFile, ClientCertificateData: rc.CertData, ClientKeyData: rc.KeyData}
	cfg.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "test", Namespace: namespace}
	cfg.CurrentContext = "test"
	return clientcmd.WriteToFile(*cfg, path)
}
