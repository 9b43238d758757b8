// Package connqueue is a net.Listener of the connections handed to it:
// what a server that routes connections itself (by TLS protocol, by an
// egress proxy's token, from inside the process) gives each of the
// servers it routes to.
package connqueue

import (
	"context"
	"net"
	"sync"
)

// Queue is a net.Listener whose Accept returns the connections Put hands
// it. Closing it runs onClose, when set.
type Queue struct {
	addr    net.Addr
	onClose func() error
	conns   chan net.Conn
	done    chan struct{}
	once    sync.Once
}

// New is a queue whose Addr is addr.
func New(addr net.Addr, onClose func() error) *Queue {
	return &Queue{addr: addr, onClose: onClose, conns: make(chan net.Conn), done: make(chan struct{})}
}

// Put hands c to the queue's Accept, unless the queue ends or ctx does
// first (then the caller keeps c): net.ErrClosed, or ctx's error.
func (q *Queue) Put(ctx context.Context, c net.Conn) error {
	select {
	case q.conns <- c:
		return nil
	case <-q.done:
		return net.ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

// End ends the queue without running onClose: Accept and Put return
// net.ErrClosed from now on.
func (q *Queue) End() { q.once.Do(func() { close(q.done) }) }

// Ended reports whether the queue has ended.
func (q *Queue) Ended() bool {
	select {
	case <-q.done:
		return true
	default:
		return false
	}
}

// Accept implements net.Listener.
func (q *Queue) Accept() (net.Conn, error) {
	select {
	case c := <-q.conns:
		return c, nil
	case <-q.done:
		return nil, net.ErrClosed
	}
}

// Close implements net.Listener: it ends the queue and runs onClose.
func (q *Queue) Close() error {
	q.End()
	if q.onClose == nil {
		return nil
	}
	return q.onClose()
}

// Addr implements net.Listener.
func (q *Queue) Addr() net.Addr { return q.addr }
