package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
	corral "github.com/corral-sandbox/corral/client"
)

// waitFor waits until each sandbox the requests returned reaches goal
// (the gateway decides: corral.Client.Wait), all at once, printing each
// change of phase on progress; timeout (0: none) bounds the wait.
func waitFor(ctx context.Context, c *corral.Client, targets []*corralv1.Sandbox, goal corral.Goal, timeout time.Duration, progress io.Writer) error {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex // one line at a time
		errs = make([]error, len(targets))
	)
	for i, target := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			last := target.Phase + ": " + target.Reason // print changes only
			_, errs[i] = c.Wait(ctx, target, goal, func(sb *corralv1.Sandbox) {
				line := sb.Phase + ": " + sb.Reason
				if line == last {
					return
				}
				last = line
				mu.Lock()
				defer mu.Unlock()
				if sb.Reason != "" {
					fmt.Fprintf(progress, "sandbox %q: %s (%s)\n", sb.Name, sb.Phase, oneLine(sb.Reason))
				} else {
					fmt.Fprintf(progress, "sandbox %q: %s\n", sb.Name, sb.Phase)
				}
			})
			if errs[i] == nil && goal == corral.Deleted {
				mu.Lock()
				defer mu.Unlock()
				fmt.Fprintf(progress, "sandbox %q: deleted\n", target.Name)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
