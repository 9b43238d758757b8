package cli

import (
	"fmt"
	"strings"

	corral "github.com/corral-sandbox/corral/client"
	"github.com/corral-sandbox/corral/internal/config"
)

// homeDir is --home, else the default home (CORRAL_HOME, ...).
func (g *globals) homeDir() string {
	if g.home != "" {
		return g.home
	}
	return config.DefaultHome()
}

// dial connects to the gateway the flags, the environment and the
// contexts name (corral.Options.Target says in which order).
func (g *globals) dial() (*corral.Client, error) {
	if g.gateway != "" && !strings.HasPrefix(g.gateway, "unix://") {
		return nil, fmt.Errorf("--gateway %q: want unix:///path/to/corral.sock (for https, add a context)", g.gateway)
	}
	return corral.New(corral.Options{Gateway: g.gateway, Context: g.context, Home: g.home, Token: g.token, Tenant: g.tenant})
}

// call dials the gateway, runs fn on it, and explains fn's error in plain
// words.
func (g *globals) call(fn func(c *corral.Client) error) error {
	c, err := g.dial()
	if err != nil {
		return err
	}
	defer c.Close()
	if err := fn(c); err != nil {
		return c.Explain(err)
	}
	return nil
}
