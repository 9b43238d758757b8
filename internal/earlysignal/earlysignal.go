// Package earlysignal subscribes a gateway process to SIGTERM and SIGINT
// from its package init: it imports only the standard library, so Go
// initializes it before the heavy dependencies (gRPC, protobuf, the Docker
// client), and a signal that arrives while the gateway starts is kept for
// its graceful shutdown instead of killing it. What is left is the Go
// runtime's own start, before any package init runs.
package earlysignal

import (
	"os"
	"os/signal"
	"strings"
	"syscall"
)

var early chan os.Signal

func init() {
	if runsGateway(os.Args[1:]) && !lateHandler {
		early = make(chan os.Signal, 2)
		signal.Notify(early, syscall.SIGTERM, syscall.SIGINT)
	}
}

// runsGateway reports whether the command line runs `corral gateway`.
func runsGateway(args []string) bool {
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case a == "gateway":
			// not its subcommands (doctor, client-cert, revoke)
			return i+1 == len(args) || strings.HasPrefix(args[i+1], "-")
		case a == "--home" || a == "--gateway" || a == "--context":
			i++ // the flag's value
		case !strings.HasPrefix(a, "-"):
			return false // another command
		}
	}
	return false
}

// Signals returns the channel subscribed at init, or subscribes one now.
// Only a test build that re-introduces the late-signal-handler failure gets
// nil, and the gateway then subscribes after its recovery.
func Signals() chan os.Signal {
	if lateHandler {
		return nil
	}
	if early != nil {
		return early
	}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	return sigs
}
