// Command corral is the sandbox gateway and its command line client.
package main

import (
	"os"

	"github.com/corral-sandbox/corral/internal/cli"
)

func main() { os.Exit(cli.Main()) }
