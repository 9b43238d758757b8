// Package ledger keeps what the egress proxies report in the store: each
// use of a credential (and each refusal of its placeholder) by secret,
// each refused or audited connection or request by sandbox. The proxies
// hand entries over without waiting (a request is never slowed by a
// write); one goroutine writes what queued in one transaction, at most
// flushEvery after the first of them (a commit per request would cost a
// busy proxy a third of its speed), at once when someone reads, and only
// then passes the entries, with their sequence numbers, to those who
// follow. What a SIGKILL catches in the queue (at most flushEvery of
// entries), or a full disk refuses, is lost and counted, never blocking a
// proxy.
package ledger

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/corral-sandbox/corral/internal/sandbox"
)

// Store keeps the ledgers (store.Store does).
type Store interface {
	AppendLedger(ctx context.Context, uses []sandbox.CredentialUse, denials []sandbox.EgressDecision) error
	CredentialUses(ctx context.Context, tenant, secret string, after int64, limit int) ([]sandbox.CredentialUse, error)
	EgressDenials(ctx context.Context, id string, after int64, limit int) ([]sandbox.EgressDecision, error)
}

// queued bounds the entries waiting for a write; maxBatch those that
// make the writer write at once; flushEvery how long the first of them
// waits for others.
const (
	queued     = 8192
	maxBatch   = 1024
	flushEvery = 100 * time.Millisecond
)

// Listed bounds what Uses and Denials return of the past.
const Listed = 1000

// entry is one queued use or denial.
type entry struct {
	use    *sandbox.CredentialUse
	denial *sandbox.EgressDecision
}

// Ledger is the writer and the reader of the ledgers.
type Ledger struct {
	store   Store
	log     *slog.Logger
	wake    chan struct{}      // the writer's: a batch began, filled, or the ledger closes
	flushes chan chan struct{} // a reader's: write what is queued, then close it
	done    chan struct{}

	mu       sync.Mutex
	pending  []entry                                // queued, not yet written
	useSubs  map[chan sandbox.CredentialUse]string  // to the secret followed (secretKey)
	denySubs map[chan sandbox.EgressDecision]string // to the sandbox id followed
	lost     int                                    // entries dropped since the last report
	closed   bool
}

// New starts a ledger on st; Close flushes and stops it.
func New(st Store, log *slog.Logger) *Ledger {
	l := &Ledger{store: st, log: log, wake: make(chan struct{}, 1), flushes: make(chan chan struct{}), done: make(chan struct{}),
		useSubs: map[chan sandbox.CredentialUse]string{}, denySubs: map[chan sandbox.EgressDecision]string{}}
	go l.run()
	return l
}

// Used queues a credential's use; it never blocks.
func (l *Ledger) Used(u sandbox.CredentialUse) { l.queue(entry{use: &u}) }

// Denied queues an egress denial (or audit); it never blocks.
func (l *Ledger) Denied(d sandbox.EgressDecision) { l.queue(entry{denial: &d}) }

// queue adds e to the pending entries, waking the writer only for the
// first of a batch and a full one: a busy proxy does not wake it for
// each request.
func (l *Ledger) queue(e entry) {
	l.mu.Lock()
	if l.closed || len(l.pending) >= queued {
		l.lost++
		l.mu.Unlock()
		return
	}
	l.pending = append(l.pending, e)
	n := len(l.pending)
	l.mu.Unlock()
	if n == 1 || n == maxBatch {
		l.signal()
	}
}

func (l *Ledger) signal() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// Close writes what is queued and stops the writer; what comes after is
// lost.
func (l *Ledger) Close() {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	l.signal()
	<-l.done
}

// take returns the pending entries, and whether the ledger is closed.
func (l *Ledger) take() ([]entry, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	batch := l.pending
	l.pending = nil
	return batch, l.closed
}

// run writes the pending entries, a batch per transaction: flushEvery
// after the first of a batch, at once when it is full, when a reader
// asks, and when the ledger closes.
func (l *Ledger) run() {
	defer close(l.done)
	timer := time.NewTimer(flushEvery)
	timer.Stop()
	for {
		var reply chan struct{}
		select {
		case <-l.wake:
			l.mu.Lock()
			wait := !l.closed && len(l.pending) < maxBatch
			l.mu.Unlock()
			if wait {
				timer.Reset(flushEvery)
				select {
				case <-timer.C:
				case <-l.wake:
					timer.Stop()
				case reply = <-l.flushes:
					timer.Stop()
				}
			}
		case reply = <-l.flushes:
		}
		batch, closed := l.take()
		l.write(batch)
		if reply != nil {
			close(reply)
		}
		if closed {
			return
		}
	}
}

// flush writes what is queued before a read: a use reported before it is
// listed.
func (l *Ledger) flush(ctx context.Context) {
	reply := make(chan struct{})
	select {
	case l.flushes <- reply:
	case <-l.done:
		return
	case <-ctx.Done():
		return
	}
	select {
	case <-reply:
	case <-l.done:
	case <-ctx.Done():
	}
}

// write keeps a batch, then passes it on to the followers.
func (l *Ledger) write(batch []entry) {
	if len(batch) == 0 {
		return
	}
	var uses []sandbox.CredentialUse
	var denials []sandbox.EgressDecision
	for _, e := range batch {
		if e.use != nil {
			uses = append(uses, *e.use)
		} else {
			denials = append(denials, *e.denial)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	err := l.store.AppendLedger(ctx, uses, denials)
	cancel()
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.lost += len(batch)
	}
	if l.lost > 0 && l.log != nil {
		l.log.Warn("ledger: entries lost (the queue was full, or the store refused them)", "lost", l.lost, "err", err)
		l.lost = 0
	}
	if err != nil {
		return
	}
	for _, u := range uses {
		for ch, key := range l.useSubs {
			if key == secretKey(u.Tenant, u.Secret) {
				send(ch, u)
			}
		}
	}
	for _, d := range denials {
		for ch, id := range l.denySubs {
			if id == d.SandboxID {
				send(ch, d)
			}
		}
	}
}

// send passes v on unless ch is full: a follower that falls behind misses
// entries, never slows the writer.
func send[T any](ch chan T, v T) {
	select {
	case ch <- v:
	default:
	}
}

// secretKey names a secret among every tenant's.
func secretKey(tenant, secret string) string { return tenant + "/" + secret }

// Uses returns the newest Listed uses of a tenant's secret, oldest first,
// and with follow a channel of those to come and the function that stops
// it.
func (l *Ledger) Uses(ctx context.Context, tenant, secret string, follow bool) ([]sandbox.CredentialUse, <-chan sandbox.CredentialUse, func(), error) {
	l.flush(ctx)
	return read(l, l.useSubs, secretKey(tenant, secret), follow, func(after int64) ([]sandbox.CredentialUse, error) {
		return l.store.CredentialUses(ctx, tenant, secret, after, Listed)
	}, func(u sandbox.CredentialUse) int64 { return u.Seq })
}

// LastUse returns the newest use of a tenant's secret, nil when none.
func (l *Ledger) LastUse(ctx context.Context, tenant, secret string) (*sandbox.CredentialUse, error) {
	l.flush(ctx)
	last, err := l.store.CredentialUses(ctx, tenant, secret, 0, 1)
	if err != nil || len(last) == 0 {
		return nil, err
	}
	return &last[0], nil
}

// Denials returns the newest Listed denials of sandbox id, oldest first,
// and with follow a channel of those to come and the function that stops
// it.
func (l *Ledger) Denials(ctx context.Context, id string, follow bool) ([]sandbox.EgressDecision, <-chan sandbox.EgressDecision, func(), error) {
	l.flush(ctx)
	return read(l, l.denySubs, id, follow, func(after int64) ([]sandbox.EgressDecision, error) {
		return l.store.EgressDenials(ctx, id, after, Listed)
	}, func(d sandbox.EgressDecision) int64 { return d.Seq })
}

// SandboxGone ends the following of a deleted sandbox's denials.
func (l *Ledger) SandboxGone(id string) { end(l, l.denySubs, id) }

// SecretGone ends the following of a deleted secret's uses.
func (l *Ledger) SecretGone(tenant, name string) { end(l, l.useSubs, secretKey(tenant, name)) }

// end closes the followers of key: their channels end.
func end[T any](l *Ledger, subs map[chan T]string, key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for ch, k := range subs {
		if k == key {
			delete(subs, ch)
			close(ch)
		}
	}
}

// read lists the past of key and, with follow, subscribes first, so that
// nothing written meanwhile is missed; what the channel repeats of the
// past is skipped.
func read[T any](l *Ledger, subs map[chan T]string, key string, follow bool, past func(after int64) ([]T, error), seq func(T) int64) ([]T, <-chan T, func(), error) {
	if !follow {
		list, err := past(0)
		return list, nil, func() {}, err
	}
	raw := make(chan T, 256)
	l.mu.Lock()
	subs[raw] = key
	l.mu.Unlock()
	stop := sync.OnceFunc(func() {
		l.mu.Lock()
		delete(subs, raw)
		l.mu.Unlock()
	})
	list, err := past(0)
	if err != nil {
		stop()
		return nil, nil, nil, err
	}
	var last int64
	if len(list) > 0 {
		last = seq(list[len(list)-1])
	}
	out := make(chan T, 256)
	quit := make(chan struct{})
	go func() {
		defer close(out)
		for {
			select {
			case v, ok := <-raw:
				if !ok {
					return
				}
				if seq(v) <= last {
					continue
				}
				select {
				case out <- v:
				case <-quit:
					return
				}
			case <-quit:
				return
			}
		}
	}()
	return list, out, sync.OnceFunc(func() { stop(); close(quit) }), nil
}
