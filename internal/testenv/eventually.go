package testenv

import (
	"fmt"
	"testing"
	"time"
)

// Eventually calls cond until it returns nil and fails the test with cond's
// last error when limit passes first. The limit only bounds a hang: pick it
// generous. cond runs on the test's goroutine, so it may call t.Fatal. It
// is called again after 1 ms, then at doubling waits up to 20 ms.
//
// Inside a testing/synctest bubble the waits between calls take no real
// time: the bubble's clock moves on only once everything else waits too.
func Eventually(t testing.TB, limit time.Duration, cond func() error) {
	t.Helper()
	if err := Until(limit, cond); err != nil {
		t.Fatal(err)
	}
}

// Until is Eventually for a caller that goes on after a timeout: it returns
// nil once cond does, or cond's last error, wrapped, when limit passes.
func Until(limit time.Duration, cond func() error) error {
	end := time.Now().Add(limit)
	wait := time.Millisecond
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if !time.Now().Before(end) {
			return fmt.Errorf("not within %s: %w", limit, err)
		}
		time.Sleep(min(wait, time.Until(end)))
		wait = min(2*wait, 20*time.Millisecond)
	}
}
