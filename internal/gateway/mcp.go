package gateway

import (
	"container/list"
	"fmt"
	"net/http"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/corral-sandbox/corral/client"
	"github.com/corral-sandbox/corral/internal/caller"
	"github.com/corral-sandbox/corral/internal/console"
	"github.com/corral-sandbox/corral/internal/mcptools"
	"github.com/corral-sandbox/corral/internal/metrics"
	"github.com/corral-sandbox/corral/internal/service"
)

// mcpPath is where the gateway serves MCP on its TLS listener.
const mcpPath = "/mcp"

// maxMCPCallers bounds the callers whose MCP server (and in-process
// connection) the gateway keeps between their requests; the least
// recently seen goes first.
const maxMCPCallers = 64

// mcpEndpoint serves the MCP tool set over streamable HTTP, stateless:
// each request runs for the caller its bearer token or client certificate
// names (checked on every request: a revoked token is refused at once),
// through an in-process connection to the API core. The sandboxes one
// caller creates through it carry the label of its session, "https
// CALLER", and are bounded by maxSandboxes.
type mcpEndpoint struct {
	fe           console.Clients // the gateway's own (frontEnds), or a standby's of the leader (leaderClients)
	gate         service.Gate
	maxSandboxes int

	mu      sync.Mutex
	callers map[string]*list.Element // of *mcpCaller, most recent first
	order   list.List
}

// mcpCaller is what the endpoint keeps of one caller.
type mcpCaller struct {
	key     string // the caller's name, tenant and role
	client  *client.Client
	handler http.Handler
}

// newMCPEndpoint is the HTTP handler of the TLS listener. A browser that
// holds a client certificate sends it to any page's request: a
// state-changing request from another origin is refused
// (http.CrossOriginProtection, by Sec-Fetch-Site and Origin), so that no
// web page drives a sandbox through its visitor's certificate.
//
// It also serves /metrics, to admins only: the labels name every tenant's
// secrets.
//
// Everything else is the web console, whose browsers log in with the
// client certificate they hold, or a token.
func newMCPEndpoint(fe console.Clients, gate service.Gate, maxSandboxes int) http.Handler {
	e := &mcpEndpoint{fe: fe, gate: gate, maxSandboxes: maxSandboxes, callers: map[string]*list.Element{}}
	mux := http.NewServeMux()
	mux.Handle(mcpPath, e)
	mux.Handle("/metrics", adminOnly(gate, metrics.Handler()))
	mux.Handle("/", console.New(fe, gate))
	return http.NewCrossOriginProtection().Handler(mux)
}

// adminOnly serves h to admins; others get 401 or 403 with the reason.
func adminOnly(gate service.Gate, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		who, err := gate.HTTPCaller(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		if who.Role != caller.Admin {
			http.Error(w, fmt.Sprintf("%s is not an admin; /metrics needs the admin role", who.Name), http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}

func (e *mcpEndpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	who, err := e.gate.HTTPCaller(r)
	if err != nil {
		w.Header().Set("WWW-Authenticate", `Bearer realm="corral"`)
		http.Error(w, err.Error(), http.StatusUnauthorized)
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
	key := who.String()
	if el, ok := e.callers[key]; ok {
		e.order.MoveToFront(el)
		return el.Value.(*mcpCaller).handler, nil
	}
	c, err := e.fe.Client(who)
	if err != nil {
		return nil, err
	}
	server := mcptools.NewServer(c, mcptools.Options{Session: "https " + who.Name, MaxSandboxes: e.maxSandboxes})
	mc := &mcpCaller{key: key, client: c, handler: mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server },
		&mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true})}
	e.callers[key] = e.order.PushFront(mc)
	if e.order.Len() > maxMCPCallers {
		oldest := e.order.Back()
		e.order.Remove(oldest)
		old := oldest.Value.(*mcpCaller)
		delete(e.callers, old.key)
		go old.client.Close() // its requests in flight end with it
	}
	return mc.handler, nil
}
