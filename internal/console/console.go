// Package console is the gateway's web console: pages a browser loads
// (embedded, no inline script) and a small JSON and server-sent-events
// API they call, every call of which goes through a client of the API
// core on behalf of the session's caller, so the console decides nothing
// the core does not. A session is a bearer token the user typed in,
// kept in this process and checked again on every request (a revoked
// token ends its sessions at once), behind an HttpOnly, SameSite=Strict
// cookie; a state-changing request needs the session's CSRF token too and
// a same-origin fetch (http.CrossOriginProtection).
package console

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
	"github.com/corral-sandbox/corral/client"
	"github.com/corral-sandbox/corral/internal/caller"
)

//go:embed static
var static embed.FS

// Clients make clients of the API core on behalf of a caller.
type Clients interface {
	Client(c caller.Caller) (*client.Client, error)
}

// Tokens names the caller of a bearer token (service.Gate).
type Tokens interface {
	Token(ctx context.Context, token string) (caller.Caller, error)
}

// cookieName is the session's cookie; sessionTTL bounds a session's life
// (its token's may be shorter: it is checked on every request).
const (
	cookieName = "corral_console"
	sessionTTL = 12 * time.Hour
	maxBody    = 1 << 20
	// maxSessions bounds the sessions (each holds a client connection):
	// a login past it ends the session that expires first.
	maxSessions = 1024
)

// Console serves the web console.
type Console struct {
	clients Clients
	tokens  Tokens
	mux     *http.ServeMux

	mu       sync.Mutex
	sessions map[string]*session
}

// session is one browser's login: a token it typed in, or (over mutual
// TLS) the client certificate it holds.
type session struct {
	token   string // "": a certificate's session, which every request's certificate must name
	csrf    string
	expires time.Time
	caller  caller.Caller
	client  *client.Client

	mu     sync.Mutex
	tenant string // the tenant an admin chose to act in; "": the token's
}

// in is ctx carrying the tenant the session acts in, which the API's gate
// takes or refuses as from any client.
func (s *session) in(ctx context.Context) context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tenant == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, client.TenantKey, s.tenant)
}

// New is a console on clients, whose logins tokens checks.
func New(clients Clients, tokens Tokens) *Console {
	c := &Console{clients: clients, tokens: tokens, mux: http.NewServeMux(), sessions: map[string]*session{}}
	assets, _ := fs.Sub(static, "static")
	c.mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(assets)))
	c.mux.HandleFunc("GET /login", c.page("login.html"))
	c.mux.HandleFunc("POST /login", c.login)
	c.mux.HandleFunc("POST /logout", c.logout)
	c.mux.HandleFunc("GET /{$}", c.page("index.html"))
	c.mux.HandleFunc("GET /api/session", c.api(c.whoami))
	c.mux.HandleFunc("GET /api/watch", c.api(c.watch))
	c.mux.HandleFunc("POST /api/sandboxes", c.api(c.create))
	c.mux.HandleFunc("GET /api/sandboxes/{name}", c.api(c.get))
	c.mux.HandleFunc("GET /api/sandboxes/{name}/logs", c.api(c.logs))
	c.mux.HandleFunc("GET /api/sandboxes/{name}/terminal", c.terminal)
	c.mux.HandleFunc("GET /api/sandboxes/{name}/denials", c.api(c.denials))
	c.mux.HandleFunc("GET /api/sandboxes/{name}/credentials", c.api(c.credentials))
	c.mux.HandleFunc("POST /api/sandboxes/{name}/snapshot", c.api(c.snapshot))
	c.mux.HandleFunc("GET /api/pools", c.api(c.pools))
	c.mux.HandleFunc("GET /api/doctor", c.api(c.doctor))
	c.mux.HandleFunc("GET /api/tenants", c.api(c.tenants))
	c.mux.HandleFunc("POST /api/tenant", c.api(c.switchTenant))
	c.mux.HandleFunc("POST /api/sandboxes/{name}/{action}", c.api(c.act))
	return c
}

// ServeHTTP sets the headers every answer has, refuses cross-origin
// state changes, and serves.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	// No script but the console's own files. Styles may be set inline:
	// the terminal widget (xterm.js) writes its own style element.
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self'; "+
		"connect-src 'self'; font-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	http.NewCrossOriginProtection().Handler(c.mux).ServeHTTP(w, r)
}

// Close ends every session.
func (c *Console) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, s := range c.sessions {
		s.client.Close()
		delete(c.sessions, id)
	}
}

// page serves an embedded page: index.html only to a session.
func (c *Console) page(name string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if name == "index.html" {
			if _, err := c.session(r); err != nil {
				who, ok, _ := caller.FromTLS(r.TLS)
				if !ok {
					http.Redirect(w, r, "/login", http.StatusSeeOther)
					return
				}
				if err := c.start(w, r, "", who); err != nil {
					http.Error(w, err.Error(), http.StatusServiceUnavailable)
					return
				}
			}
		}
		b, err := static.ReadFile("static/" + name)
		if err != nil {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write(b)
	}
}

// login makes a session of the token the form gives.
func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxBody)
	token := strings.TrimSpace(r.PostFormValue("token"))
	who, err := c.tokens.Token(r.Context(), token)
	if err != nil || token == "" {
		http.Redirect(w, r, "/login?failed=1", http.StatusSeeOther)
		return
	}
	if err := c.start(w, r, token, who); err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// start makes a session of who (of token, or of r's certificate when
// token is "") and gives the browser its cookie.
func (c *Console) start(w http.ResponseWriter, r *http.Request, token string, who caller.Caller) error {
	cl, err := c.clients.Client(who)
	if err != nil {
		return err
	}
	id, csrf := random(), random()
	c.mu.Lock()
	c.collect()
	if len(c.sessions) >= maxSessions {
		c.endFirstToExpire()
	}
	c.sessions[id] = &session{token: token, csrf: csrf, expires: time.Now().Add(sessionTTL), caller: who, client: cl}
	c.mu.Unlock()
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: id, Path: "/", HttpOnly: true, Secure: r.TLS != nil,
		SameSite: http.SameSiteStrictMode, MaxAge: int(sessionTTL.Seconds())})
	r.AddCookie(&http.Cookie{Name: cookieName, Value: id})
	return nil
}

func (c *Console) logout(w http.ResponseWriter, r *http.Request) {
	if ck, err := r.Cookie(cookieName); err == nil {
		c.end(ck.Value)
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

// collect ends the expired sessions; c.mu is held.
func (c *Console) collect() {
	for id, s := range c.sessions {
		if time.Now().After(s.expires) {
			s.client.Close()
			delete(c.sessions, id)
		}
	}
}

// endFirstToExpire ends the session that expires first; c.mu is held.
func (c *Console) endFirstToExpire() {
	first := ""
	for id, s := range c.sessions {
		if first == "" || s.expires.Before(c.sessions[first].expires) {
			first = id
		}
	}
	if s, ok := c.sessions[first]; ok {
		s.client.Close()
		delete(c.sessions, first)
	}
}

func (c *Console) end(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.sessions[id]; ok {
		s.client.Close()
		delete(c.sessions, id)
	}
}

var errNoSession = errors.New("not logged in")

// session is r's session, its token checked again.
func (c *Console) session(r *http.Request) (*session, error) {
	ck, err := r.Cookie(cookieName)
	if err != nil {
		return nil, errNoSession
	}
	c.mu.Lock()
	s, ok := c.sessions[ck.Value]
	c.mu.Unlock()
	if !ok || time.Now().After(s.expires) {
		return nil, errNoSession
	}
	if s.token == "" {
		if who, ok, _ := caller.FromTLS(r.TLS); !ok || who != s.caller {
			return nil, errNoSession // another certificate, or none, brought the cookie
		}
		return s, nil
	}
	if _, err := c.tokens.Token(r.Context(), s.token); err != nil {
		c.end(ck.Value)
		return nil, err
	}
	return s, nil
}

// api runs an API handler for r's session; a POST needs its CSRF token.
func (c *Console) api(h func(w http.ResponseWriter, r *http.Request, s *session) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s, err := c.session(r)
		if err != nil {
			writeError(w, http.StatusUnauthorized, err.Error())
			return
		}
		if r.Method == http.MethodPost && subtle.ConstantTimeCompare([]byte(r.Header.Get("X-CSRF-Token")), []byte(s.csrf)) != 1 {
			writeError(w, http.StatusForbidden, "a state-changing request needs the session's CSRF token")
			return
		}
		if err := h(w, r.WithContext(s.in(r.Context())), s); err != nil {
			st := status.Convert(err)
			writeError(w, httpStatus(st.Code()), st.Message())
		}
	}
}

func (c *Console) whoami(w http.ResponseWriter, _ *http.Request, s *session) error {
	s.mu.Lock()
	tenant, every := s.caller.Tenant, s.caller.Every
	if s.tenant != "" {
		tenant, every = s.tenant, false
	}
	s.mu.Unlock()
	writeJSON(w, map[string]any{"caller": s.caller.Name, "tenant": tenant, "role": s.caller.Role,
		"every": every, "admin": s.caller.Role == caller.Admin, "csrf": s.csrf, "may_act": s.caller.Role.Allows(caller.Member)})
	return nil
}

// tenants lists the tenants (an admin's list, as the API says).
func (c *Console) tenants(w http.ResponseWriter, r *http.Request, s *session) error {
	resp, err := s.client.Tenants.ListTenants(r.Context(), &corralv1.ListTenantsRequest{})
	if err != nil {
		return err
	}
	writeJSON(w, marshal(resp))
	return nil
}

// switchTenant makes the session act in the tenant the form names ("":
// the token's own); the API's gate decides whether it may, on a list.
func (c *Console) switchTenant(w http.ResponseWriter, r *http.Request, s *session) error {
	var req struct {
		Tenant string `json:"tenant"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody)).Decode(&req); err != nil {
		return status.Errorf(codes.InvalidArgument, "the tenant form: %v", err)
	}
	ctx := metadata.NewOutgoingContext(r.Context(), metadata.MD{}) // not the tenant the session acts in now
	if req.Tenant != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, client.TenantKey, req.Tenant)
	}
	if _, err := s.client.ListSandboxes(ctx, &corralv1.ListSandboxesRequest{Limit: 1}); err != nil {
		return err
	}
	s.mu.Lock()
	s.tenant = req.Tenant
	s.mu.Unlock()
	return c.whoami(w, r, s)
}

// watch streams the sandboxes' events as server-sent events, each the
// API's SandboxEvent in JSON: the list first, SYNCED, then every change.
func (c *Console) watch(w http.ResponseWriter, r *http.Request, s *session) error {
	stream, err := s.client.WatchSandboxes(r.Context(), &corralv1.WatchSandboxesRequest{})
	if err != nil {
		return err
	}
	return relay(w, r, stream.Recv, func(e events, ev *corralv1.SandboxEvent) { e.sendProto("sandbox", ev) })
}

// relay serves a stream's messages as server-sent events, each as send
// writes it. An error before the first message is the request's answer
// (a sandbox not found is 404); one after it is an error event, and the
// end of the stream.
func relay[T any](w http.ResponseWriter, r *http.Request, recv func() (T, error), send func(events, T)) error {
	m, err := recv()
	if err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	events := startEvents(w)
	for ; err == nil; m, err = recv() {
		send(events, m)
	}
	if r.Context().Err() == nil && !errors.Is(err, io.EOF) {
		events.send("error", map[string]string{"error": status.Convert(err).Message()})
	}
	return nil
}

// get is one sandbox and its journal.
func (c *Console) get(w http.ResponseWriter, r *http.Request, s *session) error {
	name := r.PathValue("name")
	sb, err := s.client.GetSandbox(r.Context(), &corralv1.GetSandboxRequest{Name: name})
	if err != nil {
		return err
	}
	ops, err := s.client.ListOperations(r.Context(), &corralv1.ListOperationsRequest{Name: name})
	if err != nil {
		return err
	}
	writeJSON(w, map[string]json.RawMessage{"sandbox": marshal(sb), "history": marshal(ops)})
	return nil
}

// logs follows a sandbox's output as server-sent events of text.
func (c *Console) logs(w http.ResponseWriter, r *http.Request, s *session) error {
	stream, err := s.client.SandboxLogs(r.Context(), &corralv1.SandboxLogsRequest{Name: r.PathValue("name"), Follow: true})
	if err != nil {
		return err
	}
	return relay(w, r, stream.Recv, func(e events, c *corralv1.LogChunk) {
		e.send("log", map[string]string{"stdout": string(c.GetStdout()), "stderr": string(c.GetStderr())})
	})
}

// denials follows a sandbox's egress denials as server-sent events.
func (c *Console) denials(w http.ResponseWriter, r *http.Request, s *session) error {
	stream, err := s.client.SandboxDenials(r.Context(), &corralv1.SandboxDenialsRequest{Name: r.PathValue("name"), Follow: true})
	if err != nil {
		return err
	}
	return relay(w, r, stream.Recv, func(e events, d *corralv1.Denial) { e.sendProto("denial", d) })
}

// keptUses bounds the credential uses a sandbox's page shows.
const keptUses = 200

// credentials are the newest uses of its tenant's secrets by a sandbox:
// each secret's ledger, as the API gives it, read for the sandbox's.
func (c *Console) credentials(w http.ResponseWriter, r *http.Request, s *session) error {
	sb, err := s.client.GetSandbox(r.Context(), &corralv1.GetSandboxRequest{Name: r.PathValue("name")})
	if err != nil {
		return err
	}
	// the sandbox's tenant, which an admin of every tenant names too
	ctx := metadata.AppendToOutgoingContext(metadata.NewOutgoingContext(r.Context(), metadata.MD{}), client.TenantKey, sb.Tenant)
	secrets, err := s.client.Secrets.ListSecrets(ctx, &corralv1.ListSecretsRequest{})
	if err != nil {
		return err
	}
	var uses []*corralv1.CredentialUse
	for _, secret := range secrets.Secrets {
		stream, err := s.client.Secrets.SecretUsage(ctx, &corralv1.SecretUsageRequest{Name: secret.Name})
		if err != nil {
			return err
		}
		for {
			u, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return err
			}
			if u.SandboxId == sb.Id {
				uses = append(uses, u)
			}
		}
	}
	sort.Slice(uses, func(i, j int) bool { return uses[i].Time.AsTime().Before(uses[j].Time.AsTime()) })
	if len(uses) > keptUses {
		uses = uses[len(uses)-keptUses:]
	}
	list := make([]json.RawMessage, 0, len(uses))
	for _, u := range uses {
		list = append(list, marshal(u))
	}
	writeJSON(w, map[string][]json.RawMessage{"uses": list})
	return nil
}

// snapshot takes a snapshot of a sandbox, named by the form.
func (c *Console) snapshot(w http.ResponseWriter, r *http.Request, s *session) error {
	var req struct {
		Name string `json:"name"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody)).Decode(&req); err != nil {
		return status.Errorf(codes.InvalidArgument, "the snapshot form: %v", err)
	}
	snap, err := s.client.Snapshots.CreateSnapshot(r.Context(), &corralv1.CreateSnapshotRequest{Sandbox: r.PathValue("name"), Name: req.Name})
	if err != nil {
		return err
	}
	writeJSON(w, map[string]json.RawMessage{"snapshot": marshal(snap)})
	return nil
}

func (c *Console) pools(w http.ResponseWriter, r *http.Request, s *session) error {
	resp, err := s.client.ListPools(r.Context(), &corralv1.ListPoolsRequest{})
	if err != nil {
		return err
	}
	writeJSON(w, marshal(resp))
	return nil
}

func (c *Console) doctor(w http.ResponseWriter, r *http.Request, s *session) error {
	resp, err := s.client.Doctor(r.Context(), &corralv1.DoctorRequest{})
	if err != nil {
		return err
	}
	writeJSON(w, marshal(resp))
	return nil
}

// createRequest is the create form's.
type createRequest struct {
	Name    string            `json:"name"`
	Image   string            `json:"image"`
	Command []string          `json:"command"`
	Labels  map[string]string `json:"labels"`
	Policy  string            `json:"policy"`
}

func (c *Console) create(w http.ResponseWriter, r *http.Request, s *session) error {
	var req createRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody)).Decode(&req); err != nil {
		return status.Errorf(codes.InvalidArgument, "the create form: %v", err)
	}
	resp, err := s.client.CreateSandbox(r.Context(), &corralv1.CreateSandboxRequest{Name: req.Name,
		Spec: &corralv1.SandboxSpec{Image: req.Image, Command: req.Command, Labels: req.Labels, Policy: req.Policy}})
	if err != nil {
		return err
	}
	writeJSON(w, map[string]json.RawMessage{"sandbox": marshal(resp.Sandbox)})
	return nil
}

// act is an action on a sandbox: stop, start, pause, resume, delete or
// delete-force.
func (c *Console) act(w http.ResponseWriter, r *http.Request, s *session) error {
	name, ctx := r.PathValue("name"), r.Context()
	var (
		sb  *corralv1.Sandbox
		err error
	)
	switch r.PathValue("action") {
	case "stop":
		sb, err = s.client.StopSandbox(ctx, &corralv1.StopSandboxRequest{Name: name})
	case "start":
		sb, err = s.client.StartSandbox(ctx, &corralv1.StartSandboxRequest{Name: name})
	case "pause":
		sb, err = s.client.PauseSandbox(ctx, &corralv1.PauseSandboxRequest{Name: name})
	case "resume":
		sb, err = s.client.ResumeSandbox(ctx, &corralv1.ResumeSandboxRequest{Name: name})
	case "delete", "delete-force":
		var resp *corralv1.DeleteSandboxResponse
		resp, err = s.client.DeleteSandbox(ctx, &corralv1.DeleteSandboxRequest{Name: name, Force: r.PathValue("action") == "delete-force"})
		sb = resp.GetSandbox()
	default:
		return status.Errorf(codes.NotFound, "no action %q: stop, start, pause, resume, delete or delete-force", r.PathValue("action"))
	}
	if err != nil {
		return err
	}
	writeJSON(w, map[string]json.RawMessage{"sandbox": marshal(sb)})
	return nil
}

// events writes server-sent events.
type events struct {
	w http.ResponseWriter
	f http.Flusher
}

func startEvents(w http.ResponseWriter) events {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	f, _ := w.(http.Flusher)
	e := events{w: w, f: f}
	e.flush()
	return e
}

func (e events) send(kind string, v any) {
	b, _ := json.Marshal(v)
	e.write(kind, b)
}

func (e events) sendProto(kind string, m proto.Message) { e.write(kind, marshal(m)) }

func (e events) write(kind string, data []byte) {
	_, _ = io.WriteString(e.w, "event: "+kind+"\ndata: ")
	_, _ = e.w.Write(data) // JSON: no newline inside
	_, _ = io.WriteString(e.w, "\n\n")
	e.flush()
}

func (e events) flush() {
	if e.f != nil {
		e.f.Flush()
	}
}

var protoJSON = protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}

func marshal(m proto.Message) json.RawMessage {
	b, err := protoJSON.Marshal(m)
	if err != nil {
		b, _ = json.Marshal(map[string]string{"error": err.Error()})
	}
	return b
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

// httpStatus is the HTTP status of a gRPC code.
func httpStatus(c codes.Code) int {
	switch c {
	case codes.InvalidArgument, codes.OutOfRange:
		return http.StatusBadRequest
	case codes.NotFound:
		return http.StatusNotFound
	case codes.AlreadyExists, codes.FailedPrecondition, codes.Aborted:
		return http.StatusConflict
	case codes.PermissionDenied:
		return http.StatusForbidden
	case codes.Unauthenticated:
		return http.StatusUnauthorized
	case codes.ResourceExhausted:
		return http.StatusTooManyRequests
	case codes.Unavailable:
		return http.StatusServiceUnavailable
	case codes.DeadlineExceeded:
		return http.StatusGatewayTimeout
	}
	return http.StatusInternalServerError
}

// random is 32 random bytes in hex.
func random() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
