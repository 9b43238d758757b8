// Command corral-supervise is corral's supervisor and exec stage alone: the
// `corral supervise` commands that run inside sandboxes, without the
// gateway, the client and their libraries, so that it starts in a fraction
// of corral's time. The gateway uses it when it lies beside the corral
// binary and is the same build (see buildid.Identity); else corral runs
// them itself.
package main

import (
	"os"

	"github.com/corral-sandbox/corral/internal/supervisecmd"
)

func main() { os.Exit(supervisecmd.Main(os.Args[1:])) }
