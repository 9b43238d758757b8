package gateway

import (
	"container/list"
	"net/http"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/corral-sandbox/corral/client"
	"github.com/corral-sandbox/corral/internal/caller"
	"github.com/corral-sandbox/corral/internal/mcptools"
)

// mcpPath is where the gateway serves MCP on its TLS listener.
const mcpPath = "/mcp"

// maxMCPCallers bounds the callers whose MCP server (and in-process
// connection) the gateway keeps between their requests; the least
// recently seen goes first.
const maxMCPCallers = 64

// mcpEndpoint serves the MCP tool set over streamable HTTP, stateless:
// each request runs for the caller its client certificate names (the TLS
// handshake verified it), through an in-process connection to the API
// core. The sandboxes one caller creates through it carry the label of
// its session, "https CALLER", and are bounded by maxSandboxes.
type mcpEndpoint struct {
	fe           *frontEnds
	maxSandboxes int

	mu      sync.Mutex
	callers map[string]*list.Element // of *mcpCaller, most recent first
	order   list.List
}

// mcpCaller is what the endpoint keeps of one caller.
type mcpCaller struct {
	name    string
	client  *client.Client
	handler http.Handler
}

// newMCPEndpoint is the HTTP handler of the TLS listener. A browser that
// holds a client certificate sends it to any page's request: a
// state-changing request from another origin is refused
// (http.CrossOriginProtection, by Sec-Fetch-Site and Origin), so that no
// web page drives a sandbox through its visitor's certificate.
func newMCPEndpoint(fe *frontEnds, maxSandboxes int) http.Handler {
	e := &mcpEndpoint{fe: fe, maxSandboxes: maxSandboxes, callers: map[string]*list.Element{}}
	mux := http.NewServeMux()
	mux.Handle(mcpPath, e)
	return http.NewCrossOriginProtection().Handler(mux)
}

func (e *mcpEndpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	who, ok := caller.FromTLS(r.TLS)
	if !ok {
		http.Error(w, "a client certificate of the gateway's CA is needed", http.StatusUnauthorized)
		return
	}
	h, err := e.handler(who)
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	h.ServeHTTP(w, r)
}

// handler is who's MCP handler, made on their first request.
func (e *mcpEndpoint) handler(who caller.Caller) (http.Handler, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if el, ok := e.callers[who.Name]; ok {
		e.order.MoveToFront(el)
		return el.Value.(*mcpCaller).handler, nil
	}
	c, err := e.fe.Client(who)
	if err != nil {
		return nil, err
	}
	server := mcptools.NewServer(c, mcptools.Options{Session: "https " + who.Name, MaxSandboxes: e.maxSandboxes})
	mc := &mcpCaller{name: who.Name, client: c, handler: mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server },
		&mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true})}
	e.callers[who.Name] = e.order.PushFront(mc)
	if e.order.Len() > maxMCPCallers {
		oldest := e.order.Back()
		e.order.Remove(oldest)
		old := oldest.Value.(*mcpCaller)
		delete(e.callers, old.name)
		go old.client.Close() // its requests in flight end with it
	}
	return mc.handler, nil
}
