package egress

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/elazarl/goproxy"

	"github.com/corral-sandbox/corral/internal/policy"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/secrets"
)

// Credentials. A sandbox's processes see a placeholder where a credential's
// value would be (Binding); the proxy puts the value in place of it, or
// signs a request again, only in requests to one of the credential's
// endpoints, in the place its policy names (a header, a query parameter,
// Basic auth, an AWS signature). A placeholder anywhere else (another host,
// path or method, another header, the path, a request body, a tunnel it
// does not inspect) refuses the request or closes the tunnel, and is a
// denied Decision: the workload tried to send a credential where it does
// not belong. Inside TLS that the proxy does not terminate it sees nothing,
// and nothing is there but a placeholder, worthless outside the sandbox.

// Binding is a credential of a sandbox's policy with the placeholders its
// running incarnation was given.
type Binding struct {
	policy.Credential
	// Placeholder stands for the value; KeyIDPlaceholder for an AWS
	// signature's access key id.
	Placeholder, KeyIDPlaceholder string
}

// Use is one injection or refusal, for the credentials' ledger.
type Use = sandbox.CredentialUse

// ReasonMismatch starts the reason of every refusal of a placeholder: a
// request carried it where the value may not go.
const ReasonMismatch = "credential_endpoint_mismatch"

// maxScannedBody bounds a request body the proxy reads whole before
// sending it on (to look for placeholders, to hash it for a signature);
// a longer one is looked at as it streams, and cut if it holds one.
const maxScannedBody = 1 << 20

// placement is where in a request a placeholder was found.
type placement struct {
	b    *Binding
	role string // "" for the value, roleKeyID for an access key id
	in   string // "the path", "the header X", "the query parameter K", "Basic auth"
}

const roleKeyID = "access_key_id"

// credentialPlan is what a request does with the credentials: the
// bindings in force when it came, and those of its endpoint (bound), to
// inject.
type credentialPlan struct {
	bindings []Binding
	bound    []*Binding
}

// find returns the binding of a placeholder in s (its value's or its
// access key id's): enough to refuse what holds one anywhere.
func find(bindings []Binding, s string) (*Binding, bool) {
	if !strings.Contains(s, secrets.PlaceholderPrefix) {
		return nil, false
	}
	for i := range bindings {
		b := &bindings[i]
		if strings.Contains(s, b.Placeholder) || b.KeyIDPlaceholder != "" && strings.Contains(s, b.KeyIDPlaceholder) {
			return b, true
		}
	}
	return nil, false
}

// placements lists where req carries placeholders: its host, path, query,
// headers (Basic credentials decoded).
func placements(bindings []Binding, req *http.Request) []placement {
	var out []placement
	look := func(s, in string) { // every placeholder in s, not only the first
		if !strings.Contains(s, secrets.PlaceholderPrefix) {
			return
		}
		for i := range bindings {
			b := &bindings[i]
			if strings.Contains(s, b.Placeholder) {
				out = append(out, placement{b: b, in: in})
			}
			if b.KeyIDPlaceholder != "" && strings.Contains(s, b.KeyIDPlaceholder) {
				out = append(out, placement{b: b, role: roleKeyID, in: in})
			}
		}
	}
	look(req.URL.Host, "the host")
	look(req.Host, "the Host header")
	path := req.URL.EscapedPath()
	if strings.Contains(path, "%") {
		if p, err := url.PathUnescape(path); err == nil {
			path += " " + p
		}
	}
	look(path, "the path")
	if q, err := url.ParseQuery(req.URL.RawQuery); err != nil {
		look(req.URL.RawQuery, "the query")
	} else if req.URL.RawQuery != "" {
		for k, vs := range q {
			look(k, "a query parameter's name")
			for _, v := range vs {
				look(v, "the query parameter "+k)
			}
		}
	}
	for name, vs := range req.Header {
		look(name, "a header's name")
		for _, v := range vs {
			if name == "Authorization" {
				if user, pass, ok := parseBasic(v); ok {
					look(user+":"+pass, "Basic auth")
					continue
				}
			}
			look(v, "the header "+name)
		}
	}
	return out
}

// parseBasic reads Basic credentials from an Authorization value.
func parseBasic(v string) (user, pass string, ok bool) {
	scheme, enc, ok := strings.Cut(v, " ")
	if !ok || !strings.EqualFold(scheme, "Basic") {
		return "", "", false
	}
	dec, err := base64.StdEncoding.DecodeString(strings.TrimSpace(enc))
	if err != nil {
		return "", "", false
	}
	user, pass, ok = strings.Cut(string(dec), ":")
	return user, pass, ok
}

// allowedIn is where b's placeholder of role may be, in a request to one
// of its endpoints.
func allowedIn(b *Binding, role string) string {
	in := b.Inject
	switch {
	case in.SigV4 != nil && role == roleKeyID:
		return "the header Authorization"
	case in.SigV4 != nil:
		return "" // the secret key signs in the sandbox; it is never sent
	case in.Header != "":
		return "the header " + in.Header
	case in.Query != "":
		return "the query parameter " + in.Query
	}
	return "Basic auth"
}

// takes says whether one of b's endpoints takes the request f, whose
// normal path is path (its method override too).
func (b *Binding) takes(f *flow, path string) bool {
	for _, e := range b.Endpoints {
		if !policy.HostMatches(e.Host, f.host) || !slices.Contains(e.Ports, f.port) || !e.Allows(f.method, path) {
			continue
		}
		if f.override == "" || f.override == f.method || e.Allows(f.override, path) {
			return true
		}
	}
	return false
}

// planCredentials decides a request's credentials: the bindings whose
// endpoints take it, or why it is refused (a placeholder where the value
// may not go).
func planCredentials(bindings []Binding, f *flow, req *http.Request) (credentialPlan, *Binding, string) {
	pl := credentialPlan{bindings: bindings}
	if path, err := normalPath(f.path); err == nil { // else no endpoint takes it
		for i := range bindings {
			if bindings[i].takes(f, path) {
				pl.bound = append(pl.bound, &bindings[i])
			}
		}
	}
	for _, at := range placements(bindings, req) {
		bound, want := slices.Contains(pl.bound, at.b), allowedIn(at.b, at.role)
		if bound && want == at.in {
			continue
		}
		where := fmt.Sprintf("%s port %d (%s %s)", f.host, f.port, f.method, f.path)
		if !bound {
			return pl, at.b, fmt.Sprintf("%s: credentials.%s's placeholder in %s of a request to %s, which is not one of its endpoints", ReasonMismatch, at.b.Name, at.in, where)
		}
		if want == "" {
			want = "no request: it signs in the sandbox"
		}
		return pl, at.b, fmt.Sprintf("%s: credentials.%s's placeholder in %s of a request to %s: its value goes in %s only", ReasonMismatch, at.b.Name, at.in, where, want)
	}
	return pl, nil, ""
}

// refuseCredential reports a refusal of b's placeholder: a denied decision
// and a refused use.
func (p *Proxy) refuseCredential(f *flow, r result, b *Binding, reason string) {
	p.emit(f, result{m: r.m, verdict: Denied, reason: reason})
	p.use(f, b, sandbox.UseRefused, reason, 0)
}

// use reports one use of b to the ledger.
func (p *Proxy) use(f *flow, b *Binding, verdict, reason string, status int) {
	if p.cfg.OnUse == nil {
		return
	}
	p.cfg.OnUse(Use{Time: time.Now(), Secret: b.Secret, Credential: b.Name, Sandbox: p.cfg.Sandbox,
		Host: clip(f.host, maxHostLen), Port: f.port, Method: clip(f.method, maxMethodLen), Path: clip(f.path, maxPathLen),
		Verdict: verdict, Reason: clip(reason, maxReasonLen), Status: status})
}

// credentialTrip is the round trip of a request of a sandbox with
// credentials: its body looked at for placeholders, the values of its
// endpoint's credentials put in, then sent; each injection is a use, with
// the upstream's status.
func (p *Proxy) credentialTrip(f *flow, r result, pl credentialPlan) goproxy.RoundTripperFunc {
	return func(req *http.Request, _ *goproxy.ProxyCtx) (*http.Response, error) {
		body, err := p.scanBody(f, r, req, pl.bindings)
		if err != nil {
			return forbidden(req, err.Error()), nil
		}
		var used []*Binding
		var values [][]byte
		for _, b := range pl.bound {
			ok, value, err := p.inject(req, b, body)
			if err != nil {
				reason := fmt.Sprintf("credentials.%s: %v", b.Name, err)
				p.emit(f, result{m: r.m, verdict: Denied, reason: reason})
				p.use(f, b, sandbox.UseRefused, reason, 0)
				return forbidden(req, reason), nil
			}
			if ok {
				used = append(used, b)
				if len(value) >= minRedacted {
					values = append(values, value)
				}
			}
		}
		resp, err := p.tr.RoundTrip(req)
		status := http.StatusBadGateway
		if err == nil {
			status = resp.StatusCode
			redact(resp, values)
		}
		for _, b := range used {
			p.use(f, b, sandbox.UseInjected, "", status)
		}
		return resp, err
	}
}

// scanBody looks for placeholders in req's body: read whole (and kept,
// returned) when it is short, else as it streams, cutting the request at
// the first. The error refuses the request.
func (p *Proxy) scanBody(f *flow, r result, req *http.Request, bindings []Binding) ([]byte, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return nil, nil
	}
	if req.ContentLength < 0 || req.ContentLength > maxScannedBody {
		req.Body = &scanningBody{ReadCloser: req.Body, s: newScanner(bindings), found: func(b *Binding) {
			p.refuseCredential(f, r, b, fmt.Sprintf("%s: credentials.%s's placeholder in the body of a request to %s port %d (%s %s): cut", ReasonMismatch, b.Name, f.host, f.port, f.method, f.path))
		}}
		return nil, nil
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, maxScannedBody+1))
	req.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("reading the request body: %v", err)
	}
	if b, ok := find(bindings, string(body)); ok {
		reason := fmt.Sprintf("%s: credentials.%s's placeholder in the body of a request to %s port %d (%s %s)", ReasonMismatch, b.Name, f.host, f.port, f.method, f.path)
		p.refuseCredential(f, r, b, reason)
		return nil, errors.New(reason)
	}
	req.Body = io.NopCloser(bytes.NewReader(body))
	req.ContentLength = int64(len(body))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	return body, nil
}

// inject puts b's value in req, in the place b names; it reports whether
// it did (a request that sends its own credential in that place keeps
// it), and the value it put in (none for a signature: the key is not
// sent).
func (p *Proxy) inject(req *http.Request, b *Binding, body []byte) (bool, []byte, error) {
	in := b.Inject
	if in.SigV4 != nil {
		ok, err := p.resign(req, b, body)
		return ok, nil, err
	}
	value, err := p.secret(req.Context(), b.Secret)
	if err != nil {
		return false, nil, err
	}
	ok, err := injectValue(req, b, value)
	return ok, value, err
}

// injectValue puts value in req where b's header, query or Basic
// injection says.
func injectValue(req *http.Request, b *Binding, value []byte) (bool, error) {
	in := b.Inject
	format := in.Format
	if format == "" {
		format = policy.ValueFormat
	}
	switch {
	case in.Header != "":
		vs := req.Header.Values(in.Header)
		if len(vs) == 0 {
			req.Header.Set(in.Header, strings.Replace(format, policy.ValueFormat, string(value), 1))
			return true, nil
		}
		done := false
		for i, v := range vs {
			if strings.Contains(v, b.Placeholder) {
				vs[i], done = strings.ReplaceAll(v, b.Placeholder, string(value)), true
			}
		}
		return done, nil
	case in.Query != "":
		q := req.URL.Query()
		if _, given := q[in.Query]; !given {
			if req.URL.RawQuery != "" {
				req.URL.RawQuery += "&"
			}
			req.URL.RawQuery += url.QueryEscape(in.Query) + "=" + url.QueryEscape(strings.Replace(format, policy.ValueFormat, string(value), 1))
			return true, nil
		}
		if !strings.Contains(req.URL.RawQuery, b.Placeholder) {
			return false, nil
		}
		req.URL.RawQuery = strings.ReplaceAll(req.URL.RawQuery, b.Placeholder, url.QueryEscape(string(value)))
		return true, nil
	}
	user, pass, ok := parseBasic(req.Header.Get("Authorization"))
	switch {
	case !ok && in.Username == "":
		return false, nil
	case !ok:
		req.SetBasicAuth(in.Username, string(value))
	case strings.Contains(user, b.Placeholder) || strings.Contains(pass, b.Placeholder):
		req.SetBasicAuth(strings.ReplaceAll(user, b.Placeholder, string(value)), strings.ReplaceAll(pass, b.Placeholder, string(value)))
	default:
		return false, nil
	}
	return true, nil
}

// secret returns a secret's value, or an error that names it and not
// the value.
func (p *Proxy) secret(ctx context.Context, name string) ([]byte, error) {
	if p.cfg.Secret == nil {
		return nil, fmt.Errorf("the proxy has no secrets")
	}
	v, err := p.cfg.Secret(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("secret %q: %v", name, err)
	}
	return v, nil
}

// sigV4Scheme starts an AWS Signature Version 4 Authorization header.
const sigV4Scheme = "AWS4-HMAC-SHA256"

// resign signs again, with the real keys, a request the sandbox signed
// with b's placeholders: the same time, region and service (those b
// fixes, if any), every header it sends. A request signed with other
// keys, or not signed, passes as it is.
func (p *Proxy) resign(req *http.Request, b *Binding, body []byte) (bool, error) {
	auth := req.Header.Get("Authorization")
	rest, ok := strings.CutPrefix(auth, sigV4Scheme+" ")
	if !ok {
		return false, nil
	}
	var scope []string
	for _, part := range strings.Split(rest, ",") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(part), "Credential="); ok {
			scope = strings.Split(v, "/")
		}
	}
	if len(scope) != 5 || scope[4] != "aws4_request" {
		return false, fmt.Errorf("the AWS signature's Credential is not KEY/DATE/REGION/SERVICE/aws4_request")
	}
	if scope[0] != b.KeyIDPlaceholder {
		return false, nil
	}
	sv := b.Inject.SigV4
	region, service := scope[2], scope[3]
	if sv.Region != "" && region != sv.Region || sv.Service != "" && service != sv.Service {
		return false, fmt.Errorf("the request is signed for %s in %s; the credential signs for %s in %s only", service, region, cmp.Or(sv.Service, "any service"), cmp.Or(sv.Region, "any region"))
	}
	when, err := time.Parse("20060102T150405Z", req.Header.Get("X-Amz-Date"))
	if err != nil {
		return false, fmt.Errorf("the signed request has no X-Amz-Date")
	}
	hash := req.Header.Get("X-Amz-Content-Sha256")
	switch {
	case strings.HasPrefix(hash, "STREAMING-"):
		return false, fmt.Errorf("a chunk-signed upload (%s) cannot be signed again: have the client send the payload whole or unsigned", hash)
	case hash == "" && req.Body != nil && req.Body != http.NoBody && body == nil:
		return false, fmt.Errorf("a body longer than %d bytes without X-Amz-Content-Sha256 cannot be hashed to sign it", maxScannedBody)
	case hash == "":
		sum := sha256.Sum256(body)
		hash = hex.EncodeToString(sum[:])
	}
	keyID, err := p.secret(req.Context(), sv.AccessKeyID)
	if err != nil {
		return false, err
	}
	key, err := p.secret(req.Context(), b.Secret)
	if err != nil {
		return false, err
	}
	creds := aws.Credentials{AccessKeyID: string(keyID), SecretAccessKey: string(key)}
	req.Header.Del("X-Amz-Security-Token")
	if sv.SessionToken != "" {
		token, err := p.secret(req.Context(), sv.SessionToken)
		if err != nil {
			return false, err
		}
		creds.SessionToken = string(token)
	}
	req.Header.Del("Authorization")
	if err := v4.NewSigner().SignHTTP(req.Context(), creds, req, hash, service, region, when); err != nil {
		return false, fmt.Errorf("signing: %v", err)
	}
	return true, nil
}

// scanner finds placeholders in a stream, across the boundaries of its
// reads.
type scanner struct {
	bindings []Binding
	tail     []byte // the last bytes seen, shorter than a placeholder
	keep     int
}

func newScanner(bindings []Binding) *scanner {
	keep := 0
	for _, b := range bindings {
		keep = max(keep, len(b.Placeholder), len(b.KeyIDPlaceholder))
	}
	return &scanner{bindings: bindings, keep: keep}
}

// placeholderPrefix is secrets.PlaceholderPrefix, for streams.
var placeholderPrefix = []byte(secrets.PlaceholderPrefix)

// scan looks at the next bytes of the stream: p, and where it meets what
// came before (a placeholder cut by a read). It copies no more than a
// placeholder's length of them, and makes a string only of what holds
// the placeholders' prefix.
func (s *scanner) scan(p []byte) (*Binding, bool) {
	n := s.keep - 1
	edge := append(s.tail, p[:min(len(p), n)]...)
	var b *Binding
	var found bool
	for _, part := range [][]byte{edge, p} {
		if bytes.Contains(part, placeholderPrefix) {
			if b, found = find(s.bindings, string(part)); found {
				break
			}
		}
	}
	if len(p) >= n {
		s.tail = append(s.tail[:0], p[len(p)-n:]...)
	} else {
		s.tail = append(s.tail[:0], edge[max(len(edge)-n, 0):]...)
	}
	return b, found
}

// scanningBody is a streamed request body cut at its first placeholder.
type scanningBody struct {
	io.ReadCloser
	s     *scanner
	found func(*Binding)
	cut   bool
}

var errPlaceholderInBody = errors.New("corral egress: a credential's placeholder in the request body")

func (sb *scanningBody) Read(p []byte) (int, error) {
	if sb.cut {
		return 0, errPlaceholderInBody
	}
	n, err := sb.ReadCloser.Read(p)
	if b, found := sb.s.scan(p[:n]); found {
		sb.cut = true
		sb.found(b)
		return 0, errPlaceholderInBody
	}
	return n, err
}

// minRedacted is the shortest value redact takes out of responses:
// shorter ones would mangle what happens to hold the same bytes.
const minRedacted = 8

// redact masks, in the response to a request the proxy put values in,
// each of them (with as many '*'), in the headers and in the body as it
// streams: an endpoint that echoes what it received (a debugging
// service, an error page) does not hand the value to the sandbox.
func redact(resp *http.Response, values [][]byte) {
	if len(values) == 0 {
		return
	}
	for _, vs := range resp.Header {
		for i, v := range vs {
			if holdsAny(v, values) {
				vs[i] = string(mask([]byte(v), values))
			}
		}
	}
	if resp.Body != nil && resp.Body != http.NoBody {
		keep := 0
		for _, v := range values {
			keep = max(keep, len(v)-1)
		}
		resp.Body = &redactingBody{ReadCloser: resp.Body, values: values, keep: keep}
	}
}

// holdsAny says whether s holds one of values.
func holdsAny(s string, values [][]byte) bool {
	for _, v := range values {
		if strings.Contains(s, string(v)) {
			return true
		}
	}
	return false
}

// mask overwrites each of values in b with '*' and returns b.
func mask(b []byte, values [][]byte) []byte {
	for _, v := range values {
		for from := 0; ; {
			i := bytes.Index(b[from:], v)
			if i < 0 {
				break
			}
			for j := range v {
				b[from+i+j] = '*'
			}
			from += i + len(v)
		}
	}
	return b
}

// redactingBody is a response body with values masked, across the
// boundaries of its reads: in buf, [start, ready) is masked and goes out,
// [ready, end) is the last keep bytes read, held back until the next read
// shows whether a value starts in them.
type redactingBody struct {
	io.ReadCloser
	values            [][]byte
	keep              int
	buf               *[]byte // from redactBuffers, back at Close
	start, ready, end int
	err               error
}

// redactBuffers are redactingBody's buffers: one for each response in
// flight, not one made per response.
var redactBuffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (r *redactingBody) Read(p []byte) (int, error) {
	if r.buf == nil {
		r.buf = redactBuffers.Get().(*[]byte)
		if len(*r.buf) < 2*r.keep+1 {
			*r.buf = make([]byte, 2*r.keep+4096)
		}
	}
	buf := *r.buf
	for r.start == r.ready && r.err == nil {
		r.end = copy(buf, buf[r.ready:r.end]) // the held-back tail first
		r.start, r.ready = 0, 0
		n, err := r.ReadCloser.Read(buf[r.end:])
		r.end += n
		mask(buf[:r.end], r.values)
		r.err, r.ready = err, max(r.end-r.keep, 0)
		if err != nil {
			r.ready = r.end
		}
	}
	n := copy(p, buf[r.start:r.ready])
	r.start += n
	if r.start == r.ready && r.err != nil {
		return n, r.err
	}
	return n, nil
}

// Close closes the body and gives its buffer back.
func (r *redactingBody) Close() error {
	if r.buf != nil {
		redactBuffers.Put(r.buf)
		r.buf = nil
	}
	return r.ReadCloser.Close()
}
