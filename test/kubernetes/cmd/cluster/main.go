// Command cluster serves the tests' Kubernetes cluster outside a test: a
// real API server on an embedded etcd and a played kubelet for one
// namespace (see the package above), or none for a real kubelet to
// register with (-kubelet=false; .ci/kubelet starts one), until SIGTERM
// or SIGINT. It writes a
// kubeconfig of a cluster admin, then prints "ready", so that tests of
// another module (the torture harness, with -driver kubernetes) drive
// corral's gateway on it.
//
//	go run ./cmd/cluster -kubeconfig /tmp/kube/config -namespace corral-torture
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	kubetest "github.com/corral-sandbox/corral/test/kubernetes"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "where to write the kubeconfig")
	namespace := flag.String("namespace", "corral-torture", "the namespace the played kubelet runs the Pods of")
	played := flag.Bool("kubelet", true, "play the kubelet (false: a real one registers, .ci/kubelet, and the scheduler, volume binder and claim protection are played)")
	volumes := flag.String("volumes", "/var/lib/corral-kube/volumes", "with -kubelet=false, the directory of the claims' hostPath volumes")
	flag.Parse()
	if *kubeconfig == "" {
		log.Fatal("cluster: give -kubeconfig")
	}
	p := &process{}
	defer p.cleanup()
	rc := kubetest.StartAPIServer(p)
	api := kubetest.StartNamespace(p, rc, *namespace)
	if *played {
		kubetest.StartKubelet(p, api, *namespace)
	} else {
		kubetest.StartControllers(p, api, *namespace, *volumes)
	}

	if err := os.MkdirAll(filepath.Dir(*kubeconfig), 0o700); err != nil {
		p.Fatal(err)
	}
	if err := kubetest.WriteKubeconfig(rc, "", *namespace, *kubeconfig); err != nil {
		p.Fatal(err)
	}
	fmt.Println("ready")
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
}

// process is the ktesting.TB of a process: its cleanups run when main
// returns, a fatal error ends it after them.
type process struct {
	cleanups []func()
	failed   bool
}

func (p *process) cleanup() {
	for i := len(p.cleanups) - 1; i >= 0; i-- {
		p.cleanups[i]()
	}
	p.cleanups = nil
}

func (p *process) Attr(key, value string)       {}
func (p *process) Chdir(dir string)             { _ = os.Chdir(dir) }
func (p *process) Cleanup(f func())             { p.cleanups = append(p.cleanups, f) }
func (p *process) Error(args ...any)            { p.failed = true; log.Print(args...) }
func (p *process) Errorf(f string, args ...any) { p.failed = true; log.Printf(f, args...) }
func (p *process) Fail()                        { p.failed = true }
func (p *process) FailNow()                     { p.cleanup(); os.Exit(1) }
func (p *process) Failed() bool                 { return p.failed }
func (p *process) Fatal(args ...any)            { log.Print(args...); p.FailNow() }
func (p *process) Fatalf(f string, args ...any) { log.Printf(f, args...); p.FailNow() }
func (p *process) Helper()                      {}
func (p *process) Log(args ...any)              { log.Print(args...) }
func (p *process) Logf(f string, args ...any)   { log.Printf(f, args...) }
func (p *process) Name() string                 { return "cluster" }
func (p *process) Setenv(key, value string)     { os.Setenv(key, value) }
func (p *process) Skip(args ...any)             { p.Fatal(args...) }
func (p *process) Skipf(f string, args ...any)  { p.Fatalf(f, args...) }
func (p *process) SkipNow()                     { p.FailNow() }
func (p *process) Skipped() bool                { return false }
func (p *process) TempDir() string {
	dir, err := os.MkdirTemp("", "corral-cluster-")
	if err != nil {
		p.Fatal(err)
	}
	p.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
