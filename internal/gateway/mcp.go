package gateway

import (
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/corral-sandbox/corral/internal/caller"
	"github.com/corral-sandbox/corral/internal/mcptools"
)

// mcpPath is where the gateway serves MCP on its TLS listener.
const mcpPath = "/mcp"

// mcpHandler serves the MCP tool set over streamable HTTP, stateless: each
// request is a session of its own, run for the caller its client
// certificate names (the TLS handshake verified it) through an in-process
// connection to the API core. The sandboxes one caller creates through it
// carry the label of its session, "https CALLER", and are bounded by
// maxSandboxes.
func mcpHandler(fe *frontEnds, maxSandboxes int) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc(mcpPath, func(w http.ResponseWriter, r *http.Request) {
		who, ok := caller.FromTLS(r.TLS)
		if !ok {
			http.Error(w, "a client certificate of the gateway's CA is needed", http.StatusUnauthorized)
			return
		}
		c, err := fe.Client(who)
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		defer c.Close()
		server := mcptools.NewServer(c, mcptools.Options{Session: "https " + who.Name, MaxSandboxes: maxSandboxes})
		mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server },
			&mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true}).ServeHTTP(w, r)
	})
	return mux
}
