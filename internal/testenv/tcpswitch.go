package testenv

import (
	"io"
	"net"
	"sync"
	"testing"
)

// TCPSwitch is a TCP proxy to a server that can be taken down (its
// listener closed and every connection cut: connection refused) and
// brought back on the same address: a server that goes away and returns,
// for a client that cannot tell.
type TCPSwitch struct {
	// Addr is where clients connect.
	Addr   string
	target string

	mu    sync.Mutex
	lis   net.Listener
	conns []net.Conn
}

// NewTCPSwitch starts a proxy on loopback to target, taken down when the
// test ends.
func NewTCPSwitch(t testing.TB, target string) *TCPSwitch {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &TCPSwitch{target: target, Addr: lis.Addr().String()}
	p.serve(lis)
	t.Cleanup(p.Down)
	return p
}

func (p *TCPSwitch) serve(lis net.Listener) {
	p.mu.Lock()
	p.lis = lis
	p.mu.Unlock()
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go func() { io.Copy(up, c); up.Close() }()
			go func() { io.Copy(c, up); c.Close() }()
		}
	}()
}

// Down refuses new connections and cuts the open ones.
func (p *TCPSwitch) Down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.lis != nil {
		p.lis.Close()
		p.lis = nil
	}
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// Up listens again on the same address (a proxy that is up stays so).
func (p *TCPSwitch) Up(t testing.TB) {
	p.mu.Lock()
	up := p.lis != nil
	p.mu.Unlock()
	if up {
		return
	}
	lis, err := net.Listen("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	p.serve(lis)
}
