package connqueue

import (
	"context"
	"errors"
	"net"
	"testing"
)

func TestPutHandsToAcceptUntilTheQueueEnds(t *testing.T) {
	closed := 0
	q := New(&net.TCPAddr{}, func() error { closed++; return nil })
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	go q.Put(context.Background(), a)
	if got, err := q.Accept(); err != nil || got != a {
		t.Fatalf("Accept: %v, %v; want the connection put", got, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := q.Put(ctx, b); !errors.Is(err, context.Canceled) {
		t.Errorf("Put with nobody accepting and ctx done: %v; want ctx's error", err)
	}
	if q.Ended() {
		t.Fatal("ended before End")
	}
	q.End()
	if !q.Ended() || closed != 0 {
		t.Errorf("after End: ended %v, onClose ran %d times; want ended, not run", q.Ended(), closed)
	}
	if _, err := q.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept after End: %v", err)
	}
	if err := q.Put(context.Background(), b); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Put after End: %v", err)
	}
	q.Close()
	if closed != 1 {
		t.Errorf("Close ran onClose %d times, want 1", closed)
	}
}
