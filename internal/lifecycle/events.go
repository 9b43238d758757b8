package lifecycle

import (
	"sync"

	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

// EventType says what happened to a sandbox record.
type EventType string

// The event types.
const (
	EventAdded    EventType = "ADDED"
	EventModified EventType = "MODIFIED"
	EventDeleted  EventType = "DELETED"
	// EventSynced, without a sandbox, ends a watch's first list: every
	// sandbox it selects has been sent as EventAdded.
	EventSynced EventType = "SYNCED"
)

// Event is one change of a sandbox record.
type Event struct {
	Type    EventType
	Sandbox *sandbox.Sandbox
}

// watchBuffer is how many events a watcher may fall behind before it is cut off.
const watchBuffer = 256

// What watches are held at once: by one caller, and by all.
const (
	maxWatchesPerCaller = 256
	maxWatches          = 8192
)

// broadcaster fans record changes out to watchers. A watcher that falls
// more than watchBuffer events behind has its channel closed, so one slow
// reader never slows the gateway; a caller holds at most
// maxWatchesPerCaller watches, and all together maxWatches.
type broadcaster struct {
	mu       sync.Mutex
	subs     map[chan Event]string // the caller of each
	byCaller map[string]int
}

func (b *broadcaster) subscribe(caller string) (<-chan Event, func(), error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.byCaller[caller] >= maxWatchesPerCaller:
		return nil, nil, errdefs.ResourceExhausted("%s holds %d watches, the most one caller may: end one first", caller, b.byCaller[caller])
	case len(b.subs) >= maxWatches:
		return nil, nil, errdefs.ResourceExhausted("the gateway holds %d watches, the most it serves: try again later", len(b.subs))
	}
	if b.subs == nil {
		b.subs, b.byCaller = map[chan Event]string{}, map[string]int{}
	}
	ch := make(chan Event, watchBuffer)
	b.subs[ch] = caller
	b.byCaller[caller]++
	return ch, func() { b.drop(ch) }, nil
}

func (b *broadcaster) drop(ch chan Event) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.remove(ch)
}

// remove ends a watch; b.mu is held.
func (b *broadcaster) remove(ch chan Event) {
	caller, ok := b.subs[ch]
	if !ok {
		return
	}
	delete(b.subs, ch)
	if b.byCaller[caller]--; b.byCaller[caller] == 0 {
		delete(b.byCaller, caller)
	}
	close(ch)
}

func (b *broadcaster) publish(ev Event) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for ch := range b.subs {
		select {
		case ch <- ev:
		default:
			b.remove(ch)
		}
	}
}

// closeAll ends every watch.
func (b *broadcaster) closeAll() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for ch := range b.subs {
		b.remove(ch)
	}
}
