package lifecycle

import (
	"sync"

	"github.com/corral-sandbox/corral/internal/sandbox"
)

// EventType says what happened to a sandbox record.
type EventType string

// The event types.
const (
	EventAdded    EventType = "ADDED"
	EventModified EventType = "MODIFIED"
	EventDeleted  EventType = "DELETED"
)

// Event is one change of a sandbox record.
type Event struct {
	Type    EventType
	Sandbox *sandbox.Sandbox
}

// watchBuffer is how many events a watcher may fall behind before it is cut off.
const watchBuffer = 1024

// broadcaster fans record changes out to watchers. A watcher that falls
// more than watchBuffer events behind has its channel closed, so one slow
// reader never slows the gateway.
type broadcaster struct {
	mu   sync.Mutex
	subs map[chan Event]struct{}
}

func (b *broadcaster) subscribe() (<-chan Event, func()) {
	ch := make(chan Event, watchBuffer)
	b.mu.Lock()
	if b.subs == nil {
		b.subs = map[chan Event]struct{}{}
	}
	b.subs[ch] = struct{}{}
	b.mu.Unlock()
	return ch, func() { b.drop(ch) }
}

func (b *broadcaster) drop(ch chan Event) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.subs[ch]; ok {
		delete(b.subs, ch)
		close(ch)
	}
}

func (b *broadcaster) publish(ev Event) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for ch := range b.subs {
		select {
		case ch <- ev:
		default:
			delete(b.subs, ch)
			close(ch)
		}
	}
}

// closeAll ends every watch.
func (b *broadcaster) closeAll() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for ch := range b.subs {
		delete(b.subs, ch)
		close(ch)
	}
}
