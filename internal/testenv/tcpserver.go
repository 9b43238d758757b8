package testenv

import (
	"net"
	"testing"
)

// ServeLoopback serves TCP on a free port of 127.0.0.1 until the test
// ends, each connection with handle in a goroutine of its own (closed
// after), and returns the port.
func ServeLoopback(t testing.TB, handle func(c net.Conn)) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				handle(c)
			}()
		}
	}()
	return l.Addr().(*net.TCPAddr).Port
}
