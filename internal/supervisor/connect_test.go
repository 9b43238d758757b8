package supervisor

import (
	"bytes"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
)

// Connect says it is connected with its first byte, then carries both
// ways until the server ends; the end of its input ends the server's.
func TestConnectCarriesBothWays(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		got, _ := io.ReadAll(c) // until Connect closes its writing half
		c.Write(append([]byte("echo: "), got...))
		c.Close()
	}()
	var out bytes.Buffer
	if err := Connect(ln.Addr().(*net.TCPAddr).Port, strings.NewReader("hello"), &out); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); got != "\x00echo: hello" {
		t.Errorf("out %q; want the Connected byte, then the server's answer", got)
	}
}

func TestConnectSaysRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	var out bytes.Buffer
	if err := Connect(port, strings.NewReader(""), &out); !errors.Is(err, ErrConnectRefused) || out.Len() != 0 {
		t.Errorf("Connect to a closed port: %v, wrote %q; want ErrConnectRefused and nothing", err, out.String())
	}
}
