// Command pause is the Pods' sandbox image's program, for a node with no
// registry to pull registry.k8s.io/pause from: it holds the Pod's
// namespaces, doing nothing, until it is signalled.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
}
