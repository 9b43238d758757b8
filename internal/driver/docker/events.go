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

// watched are the container events that can change a sandbox's state:
// Docker's, and "remove", Podman's name for "destroy". They are picked
// here rather than by an event filter of the engine's: Podman applies
// that to its own names, and so never matches the "die" it sends
// ("died" to it).
var watched = map[string]bool{"start": true, "die": true, "stop": true, "kill": true, "oom": true, "destroy": true, "remove": true, "create": true}

// Watch implements driver.Watcher with the engine's event stream.
func (d *Driver) Watch(ctx context.Context, changed func(id string)) error {
	f := client.Filters{}.Add("type", "container").Add("label", d.cfg.Label+"=true")
	res := d.api.Events(ctx, client.EventsListOptions{Filters: f})
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-res.Err:
			return d.wrap(err, "events")
		case msg := <-res.Messages:
			id := msg.Actor.Attributes[driver.LabelSandboxID]
			if id == "" || !watched[string(msg.Action)] {
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
