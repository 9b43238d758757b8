package sandbox

import "time"

// ExposedPort is a sandbox's port that the gateway serves on an address of
// its own host, recorded so that the same address serves again after a
// restart. A sandbox's delete removes its exposed ports.
type ExposedPort struct {
	SandboxID string
	// Port is the TCP port on the sandbox's loopback.
	Port int
	// Address is HOST:PORT on the gateway host, with the port chosen.
	Address   string
	CreatedAt time.Time
}
