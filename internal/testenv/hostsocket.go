package testenv

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// HostSocket listens on a Unix socket of the host, in /run, that only root
// may connect to, as a sandbox must never reach: it returns its path and a
// channel that receives once per connection (each closed at once).
func HostSocket(t testing.TB, name string) (string, <-chan struct{}) {
	t.Helper()
	path := filepath.Join("/run", "corral-"+name+"-"+strconv.Itoa(os.Getpid())+".sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	accepted := make(chan struct{}, 8)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
			select {
			case accepted <- struct{}{}:
			default:
			}
		}
	}()
	return path, accepted
}
