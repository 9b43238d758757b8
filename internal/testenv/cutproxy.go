package testenv

import (
	"io"
	"net"
	"sync"
	"testing"
)

// CutProxy forwards TCP connections to a server until Cut, after which
// it forwards nothing more either way and accepts nothing new, yet keeps
// every connection open: to both ends the network has gone silent, as in
// a partition (no reset, no FIN).
type CutProxy struct {
	lis  net.Listener
	cut  chan struct{}
	once sync.Once
}

// NewCutProxy listens on loopback and forwards to target until the test
// ends.
func NewCutProxy(t *testing.T, target string) *CutProxy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &CutProxy{lis: lis, cut: make(chan struct{})}
	var conns []net.Conn
	var mu sync.Mutex
	t.Cleanup(func() {
		lis.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	go func() {
		for {
			in, err := lis.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, in, out)
			mu.Unlock()
			go p.pipe(out, in)
			go p.pipe(in, out)
		}
	}()
	return p
}

// Addr is the proxy's address.
func (p *CutProxy) Addr() string { return p.lis.Addr().String() }

// Cut silences every connection, for good.
func (p *CutProxy) Cut() { p.once.Do(func() { close(p.cut) }) }

// pipe copies from src to dst until the cut, then reads and drops.
func (p *CutProxy) pipe(dst io.Writer, src io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		select {
		case <-p.cut:
			if err != nil {
				return
			}
			continue // dropped: the network is silent
		default:
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
