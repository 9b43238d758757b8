package exposed

import (
	"errors"
	"net"
	"sync"
	"time"

	"github.com/corral-sandbox/corral/internal/sandbox"
)

// exposer is the set of exposed ports this gateway serves: a listener
// each, and the connections each carries.
type exposer struct {
	mu     sync.Mutex
	ports  map[portKey]*listening
	closed bool
	wg     sync.WaitGroup // accept loops and connections
}

type portKey struct {
	id   string
	port int
}

// listening is one exposed port: its listener and open connections, or
// why it could not listen.
type listening struct {
	l     net.Listener
	err   error
	conns map[net.Conn]struct{}
}

// close closes the listener and every connection it accepted.
func (e *listening) close() {
	if e.l != nil {
		e.l.Close()
	}
	for c := range e.conns {
		c.Close()
	}
}

// serve accepts connections on l and forwards each to port p of its
// sandbox, until the port is dropped or the exposer closed.
func (x *exposer) serve(m *Ports, p sandbox.ExposedPort, l net.Listener) {
	e := &listening{l: l, conns: map[net.Conn]struct{}{}}
	if !x.put(portKey{p.SandboxID, p.Port}, e) {
		l.Close()
		return
	}
	go func() {
		defer x.wg.Done()
		for {
			c, err := l.Accept()
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if err != nil { // out of descriptors, say: the next may work
				m.Log.Warn("accept on an exposed port", "address", p.Address, "err", err)
				time.Sleep(100 * time.Millisecond)
				continue
			}
			if !x.track(e, c) {
				c.Close()
				return
			}
			go func() {
				defer x.untrack(e, c)
				m.forward(c, p)
			}()
		}
	}()
}

// put makes e the entry of k (closing one it replaces) and counts its
// accept loop; false once the exposer is closed.
func (x *exposer) put(k portKey, e *listening) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.closed {
		return false
	}
	if x.ports == nil {
		x.ports = map[portKey]*listening{}
	}
	if old := x.ports[k]; old != nil {
		old.close()
	}
	x.ports[k] = e
	if e.l != nil {
		x.wg.Add(1)
	}
	return true
}

// track counts a connection of e; false when e was closed meanwhile.
func (x *exposer) track(e *listening, c net.Conn) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.closed || e.conns == nil {
		return false
	}
	e.conns[c] = struct{}{}
	x.wg.Add(1)
	return true
}

func (x *exposer) untrack(e *listening, c net.Conn) {
	c.Close()
	x.mu.Lock()
	delete(e.conns, c)
	x.mu.Unlock()
	x.wg.Done()
}

// failed records why port p could not be served, unless it is served.
func (x *exposer) failed(p sandbox.ExposedPort, err error) {
	k := portKey{p.SandboxID, p.Port}
	if !x.serving(k.id, k.port) {
		x.put(k, &listening{err: err})
	}
}

// serving says whether a listener serves a sandbox's port.
func (x *exposer) serving(id string, port int) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	e := x.ports[portKey{id, port}]
	return e != nil && e.l != nil
}

// problem says why a recorded port is not served, or nil.
func (x *exposer) problem(id string, port int) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	switch e := x.ports[portKey{id, port}]; {
	case e == nil:
		return errors.New("not served by this gateway yet")
	case e.l == nil:
		return e.err
	}
	return nil
}

// drop stops serving ports of sandbox id: one, or every one when port is 0.
func (x *exposer) drop(id string, port int) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for k, e := range x.ports {
		if k.id == id && (port == 0 || k.port == port) {
			e.close()
			e.conns = nil
			delete(x.ports, k)
		}
	}
}

// closeAll stops serving every port, and waits for the accept loops and
// connections to end.
func (x *exposer) closeAll() {
	x.mu.Lock()
	x.closed = true
	for k, e := range x.ports {
		e.close()
		delete(x.ports, k)
	}
	x.mu.Unlock()
	x.wg.Wait()
}

// isClosed says whether closeAll was called.
func (x *exposer) isClosed() bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.closed
}
