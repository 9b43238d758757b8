package testenv

import (
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

func TestUntilReturnsOnceCondHolds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		calls := 0
		err := Until(time.Minute, func() error {
			if calls++; calls < 5 {
				return errors.New("not yet")
			}
			return nil
		})
		if err != nil || calls != 5 {
			t.Fatalf("err %v after %d calls, want nil after 5", err, calls)
		}
	})
}

func TestUntilGivesTheLastErrorAtTheLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start, n := time.Now(), 0
		err := Until(time.Second, func() error { n++; return errors.New("still " + strings.Repeat("x", n%3)) })
		if took := time.Since(start); took != time.Second {
			t.Errorf("gave up after %s, want the limit of 1s", took)
		}
		if err == nil || !strings.HasPrefix(err.Error(), "not within 1s: still") {
			t.Fatalf("err = %v", err)
		}
	})
}
