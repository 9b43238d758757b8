package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/corral-sandbox/corral/internal/metrics"
)

// Group commit. Every write transaction of a store is a job for one
// writer goroutine. It takes the jobs that queued while it was busy, runs
// each as a SAVEPOINT inside one transaction (a job that fails rolls back
// only its own savepoint and gets its own error), commits once (one flush
// of the database's log for all), and only then answers each job's caller.
// An answered write is therefore durable, and writes commit in the order
// they queued. The transaction is the Batches' to open: it is alone of its
// kind (SQLite's one writing connection; PostgreSQL's lock of every
// writer of the database), so the jobs run as if alone.

// maxBatch bounds the jobs of one commit.
const maxBatch = 256

// ErrClosed answers a write asked of a closed store.
var ErrClosed = errors.New("the store is closed")

// Batches opens the transactions the writer runs its batches in.
type Batches interface {
	// Begin opens a transaction, alone among the store's writers.
	Begin() (Batch, error)
}

// Batch is one open transaction of the writer.
type Batch interface {
	Querier
	Commit() error
	Rollback() error
}

// job is one queued write transaction.
type job struct {
	fn    func(q Querier) error
	state atomic.Int32 // jobQueued, then jobTaken by the writer or jobAbandoned by its caller
	done  chan error   // capacity 1: the outcome, sent once the batch committed
}

const (
	jobQueued int32 = iota
	jobTaken
	jobAbandoned
)

// Writer runs the jobs in batches.
type Writer struct {
	batches Batches

	mu     sync.RWMutex // guards closed against sends on jobs
	closed bool
	jobs   chan *job
	exited chan struct{}

	// Writes and Commits count the jobs committed and the commits they
	// took (for tests; the metrics count the same).
	Writes, Commits atomic.Int64
}

// NewWriter starts a writer whose batches b opens.
func NewWriter(b Batches) *Writer {
	w := &Writer{batches: b, jobs: make(chan *job, maxBatch), exited: make(chan struct{})}
	go w.run()
	return w
}

// Write runs fn as one write transaction and returns once it is committed
// (or failed). ctx bounds only the wait in the queue: once the writer has
// taken the job, Write waits for its outcome, so a nil error always means
// a durable write and a cancelled caller never leaves a write half-known.
func (w *Writer) Write(ctx context.Context, fn func(q Querier) error) error {
	j := &job{fn: fn, done: make(chan error, 1)}
	w.mu.RLock()
	if w.closed {
		w.mu.RUnlock()
		return ErrClosed
	}
	select {
	case w.jobs <- j:
	case <-ctx.Done():
		w.mu.RUnlock()
		return ctx.Err()
	}
	w.mu.RUnlock()
	select {
	case err := <-j.done:
		return err
	case <-ctx.Done():
		if j.state.CompareAndSwap(jobQueued, jobAbandoned) {
			return ctx.Err()
		}
		return <-j.done
	}
}

// Queued is how many jobs wait for the writer.
func (w *Writer) Queued() int { return len(w.jobs) }

// Close lets the queued jobs finish and stops the writer.
func (w *Writer) Close() {
	w.mu.Lock()
	if !w.closed {
		w.closed = true
		close(w.jobs)
	}
	w.mu.Unlock()
	<-w.exited
}

func (w *Writer) run() {
	defer close(w.exited)
	var batch []*job
	for {
		if len(batch) == 0 {
			j, ok := <-w.jobs
			if !ok {
				return
			}
			batch = append(batch, j)
		}
	drain:
		for len(batch) < maxBatch {
			select {
			case j, ok := <-w.jobs:
				if !ok {
					break drain
				}
				batch = append(batch, j)
			default:
				break drain
			}
		}
		batch = w.commit(batch)
	}
}

// commit runs a batch in one transaction and answers its jobs. When the
// transaction itself breaks, the jobs run so far get the error and the
// ones not run yet are returned, to go into the next batch.
func (w *Writer) commit(batch []*job) (rest []*job) {
	var ran []*job
	outcomes := make([]error, 0, len(batch))
	answer := func(commitErr error) {
		for i, j := range ran {
			err := outcomes[i]
			if err == nil && commitErr != nil {
				err = commitErr
			}
			j.done <- err
		}
	}
	tx, err := w.batches.Begin()
	if err != nil {
		for _, j := range batch {
			if j.state.CompareAndSwap(jobQueued, jobTaken) {
				j.done <- fmt.Errorf("begin: %w", err)
			}
		}
		return nil
	}
	alone := len(batch) == 1 // its failure is the transaction's: no savepoint needed
	for i, j := range batch {
		if !j.state.CompareAndSwap(jobQueued, jobTaken) {
			continue // its caller gave up waiting in the queue
		}
		ran = append(ran, j)
		if alone {
			if err := j.fn(tx); err != nil {
				_ = tx.Rollback()
				j.done <- err
				return nil
			}
			outcomes = append(outcomes, nil)
			break
		}
		err, broken := savepoint(tx, j.fn)
		outcomes = append(outcomes, err)
		if broken != nil {
			_ = tx.Rollback()
			answer(fmt.Errorf("the transaction it was part of failed: %w", broken))
			return batch[i+1:]
		}
	}
	if len(ran) == 0 { // every caller gave up: nothing to commit
		_ = tx.Rollback()
		return nil
	}
	if err := tx.Commit(); err != nil {
		_ = tx.Rollback()
		answer(fmt.Errorf("commit: %w", err))
		return nil
	}
	w.Writes.Add(int64(len(ran)))
	w.Commits.Add(1)
	metrics.StoreCommitted(len(ran))
	answer(nil)
	return nil
}

// savepoint runs fn in a savepoint of tx, rolling it back when fn fails.
// broken is set when the transaction could not survive the failure.
func savepoint(tx Batch, fn func(q Querier) error) (err, broken error) {
	if _, err := tx.Exec(bg, "SAVEPOINT job"); err != nil {
		return err, err
	}
	if err := fn(tx); err != nil {
		if _, rerr := tx.Exec(bg, "ROLLBACK TO job"); rerr != nil {
			return err, rerr
		}
		if _, rerr := tx.Exec(bg, "RELEASE job"); rerr != nil {
			return err, rerr
		}
		return err, nil
	}
	if _, err := tx.Exec(bg, "RELEASE job"); err != nil {
		return err, err
	}
	return nil, nil
}

// bg is the context of the writer's statements: a caller's context
// governs only its wait (see Write).
var bg = context.Background()
