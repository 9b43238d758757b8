// Package buildid is what every corral binary knows of its own build, so
// that the gateway can tell whether a corral-supervise beside it is the
// same build as itself.
package buildid

import (
	"runtime"
	"runtime/debug"
	"strings"
)

// stamp, set at link time (-ldflags=-X=github.com/corral-sandbox/corral/internal/buildid.stamp=...),
// names one build of both binaries: what tells two builds of a modified
// tree apart. The tests' builds set it (internal/testenv).
var stamp string

// StampFlag is the go build flag that stamps a build as s.
func StampFlag(s string) string {
	return "-ldflags=-X=github.com/corral-sandbox/corral/internal/buildid.stamp=" + s
}

// Identity names this binary's build: its stamp if it has one, else
// the version control revision of a tree without changes; with the Go
// toolchain, the architecture and the build tags. It is "" for a build of
// a modified or unversioned tree without a stamp, which matches none.
func Identity() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	s := map[string]string{}
	for _, kv := range info.Settings {
		s[kv.Key] = kv.Value
	}
	var build string
	switch {
	case stamp != "":
		build = "stamp " + stamp
	case s["vcs.revision"] != "" && s["vcs.modified"] == "false":
		build = "revision " + s["vcs.revision"] + " " + s["vcs.time"]
	default:
		return ""
	}
	return strings.Join([]string{build, runtime.Version(), runtime.GOARCH, "tags=" + s["-tags"]}, "; ")
}
