package docker

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/distribution/reference"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/corral-sandbox/corral/internal/control"
	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/policy"
	"github.com/corral-sandbox/corral/internal/supervisor"
)

var _ driver.Validator = (*Driver)(nil)

// Validate implements driver.Validator: the image must be a valid
// reference (which also keeps it harmless in Engine API paths), or a file
// image ("docker-archive:/abs/path.tar", "oci:/abs/dir") that exists.
func (d *Driver) Validate(spec driver.Spec) error {
	if spec.Image == "" {
		return errdefs.InvalidArgument("sandbox %s names no image and the gateway has no default_image", spec.Name)
	}
	if err := checkImage(spec.Image); err != nil {
		return err
	}
	return d.checkGVisor(spec)
}

// checkImage refuses an image that is not a reference Docker would take:
// a name[:tag][@digest] or an image id. What it lets through has only
// [a-z0-9._:@/-] and no "." or ".." path element, so the moby client,
// which joins it into a URL path, reaches the image and nothing else.
//
// A file image needs an absolute path to what exists, of the right kind.
func checkImage(image string) error {
	if kind, path, ok := localSource(image); ok {
		return checkLocal(image, kind, path)
	}
	if _, err := reference.ParseAnyReference(image); err != nil {
		return errdefs.InvalidArgument("image %q is not a valid image reference: %v", image, err)
	}
	return nil
}

// harden sets what every container gets, whatever its policy: a read-only
// root file system (only /sandbox and a /tmp of limits.tmp are writable),
// exactly the capabilities a native sandbox keeps, no_new_privs, and a log
// that keeps at most the configured cap.
func (d *Driver) harden(hc *container.HostConfig, pol policy.Policy) {
	hc.ReadonlyRootfs = true
	hc.Tmpfs = map[string]string{"/tmp": fmt.Sprintf("size=%d,mode=1777,nosuid,nodev", pol.Limits.Tmp())} // private, and anyone's, as on native
	hc.CapDrop = []string{"ALL"}
	hc.CapAdd = supervisor.KeptCapabilityNames()
	hc.SecurityOpt = []string{"no-new-privileges"}
	hc.LogConfig = logConfig(d.cfg.LogMax())
}

// Log rotation: logFiles files of at most logFileSize(max) bytes each.
// json-file rotates once a file has reached max-size, after the entry that
// crossed it, so a file can pass max-size by one entry: a 16 KiB chunk of
// output, at most six times that once JSON-escaped, with its stream and
// time. logEntrySlack leaves room for it.
const (
	logFiles      = 2
	logEntrySlack = 128 << 10
	logMinFile    = 16 << 10
)

// logConfig is a json-file log that keeps at most capBytes on disk (caps
// under 2×(128+16) KiB are honoured only roughly: a file is never smaller
// than 16 KiB).
func logConfig(capBytes int64) container.LogConfig {
	return container.LogConfig{Type: "json-file", Config: map[string]string{
		"max-size": strconv.FormatInt(logFileSize(capBytes), 10),
		"max-file": strconv.Itoa(logFiles),
		"compress": "false",
	}}
}

func logFileSize(capBytes int64) int64 {
	return max(capBytes/logFiles-logEntrySlack, logMinFile)
}

// usernsNote is what protections add when the engine does not remap user
// ids: root in the container is root on the host.
const usernsNote = "engine without userns-remap"

// remapsUsers tells whether the engine runs containers in a user namespace
// of their own (userns-remap, or a rootless engine). It asks the engine
// once; ok is false when it could not.
func (d *Driver) remapsUsers(ctx context.Context) (remaps, ok bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.usernsKnown {
		return d.userns, true
	}
	res, err := d.api.Info(ctx, client.InfoOptions{})
	if err != nil {
		return false, false
	}
	d.userns = slices.ContainsFunc(res.Info.SecurityOptions, func(o string) bool {
		return strings.Contains(o, "name=userns") || strings.Contains(o, "name=rootless")
	})
	d.usernsKnown = true
	return d.userns, true
}

// protections is what a running incarnation reports it applied: the
// supervisor's report (which a workload running as root can rewrite, so
// only its printable text, capped by ReadReport) and what the engine adds.
// On the gVisor tier root in the container is gVisor's, not the host's.
func (d *Driver) protections(ctx context.Context, dir string, gvisor bool) string {
	data, err := supervisor.ReadReport(dir, supervisor.ProtectionsFile)
	if err != nil {
		return ""
	}
	text := control.Printable(string(data))
	note := ""
	if gvisor {
		note = d.gvisorProtections(ctx)
	} else if remaps, ok := d.remapsUsers(ctx); ok && !remaps {
		note = usernsNote
	}
	if text != "" && note != "" {
		text += "; "
	}
	return text + note
}
