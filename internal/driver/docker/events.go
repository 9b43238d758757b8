package docker

import (
	"bytes"
	"context"
	"strings"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"

	"github.com/corral-sandbox/corral/internal/driver"
)

// dieSettle is how long after a die event the container is looked at again.
const dieSettle = 200 * time.Millisecond

// Watch implements driver.Watcher with the engine's event stream.
func (d *Driver) Watch(ctx context.Context, changed func(id string)) error {
	f := client.Filters{}.Add("type", "container").Add("label", d.cfg.Label+"=true")
	for _, e := range []string{"start", "die", "stop", "kill", "oom", "destroy", "create"} {
		f = f.Add("event", e)
	}
	res := d.api.Events(ctx, client.EventsListOptions{Filters: f})
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-res.Err:
			return d.wrap(err, "events")
		case msg := <-res.Messages:
			id := msg.Actor.Attributes[driver.LabelSandboxID]
			if id == "" {
				continue
			}
			changed(id)
			if msg.Action == "die" {
				// The engine sends die before the container's listed state
				// says exited: look again once it does.
				time.AfterFunc(dieSettle, func() { changed(id) })
			}
		}
	}
}

// tail returns the last lines a container printed, to explain a failure.
func (d *Driver) tail(ctx context.Context, containerID string) string {
	rc, err := d.api.ContainerLogs(ctx, containerID, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true, Tail: "5"})
	if err != nil {
		return "(no logs: " + err.Error() + ")"
	}
	defer rc.Close()
	var out bytes.Buffer
	_, _ = stdcopy.StdCopy(&out, &out, rc)
	s := strings.TrimSpace(out.String())
	if s == "" {
		return "(it printed nothing)"
	}
	return s
}
