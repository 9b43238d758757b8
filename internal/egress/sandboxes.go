package egress

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/corral-sandbox/corral/internal/atomicfile"
	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/metrics"
	"github.com/corral-sandbox/corral/internal/netns"
	"github.com/corral-sandbox/corral/internal/policy"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

// Network is what a sandbox's proxy enforces, as its record has it.
type Network struct {
	Name        string
	Tenant      string
	Rules       []policy.NetworkPolicy
	Credentials []policy.Credential
	Hosts       []string // add_hosts: "NAME:IP"
}

// FromRecords is a Sandboxes.Lookup that reads a sandbox's rules from its
// record (the policy it was created or last updated with).
func FromRecords(get func(ctx context.Context, id string) (*sandbox.Sandbox, error)) func(context.Context, string) (Network, error) {
	return func(ctx context.Context, id string) (Network, error) {
		sb, err := get(ctx, id)
		if err != nil {
			return Network{}, err
		}
		pol, err := policy.Parse(sb.Spec.Policy)
		if err != nil {
			return Network{}, fmt.Errorf("sandbox %q: %w", sb.Name, err)
		}
		return Network{Name: sb.Name, Tenant: sb.Tenant, Rules: pol.Network, Credentials: pol.Credentials, Hosts: sb.Spec.Hosts}, nil
	}
}

// loggedPerSecond bounds the log lines of each sandbox's refusals (the
// rest are counted, and the count logged).
const loggedPerSecond = 20

// Sandboxes serves the egress proxies of a gateway's sandboxes: one Proxy
// each, served inside every incarnation's network namespace at
// driver.ProxyAddr, with the sandbox's CA kept under Dir. It implements
// driver.Egress and what the lifecycle asks of it.
type Sandboxes struct {
	// Dir holds a directory per sandbox: key.pem, and trust/ (its CA
	// and bundle, mounted into the sandbox).
	Dir string
	// Lookup reads a sandbox's rules from its record.
	Lookup func(ctx context.Context, id string) (Network, error)
	// Deny are the gateway host's own addresses.
	Deny []netip.Addr
	// HostBundle is the host's CA bundle, put in each sandbox's bundle
	// before its own CA ("": none).
	HostBundle string
	Logger     *slog.Logger
	// Limits bound each sandbox's proxy; Budget, when set, all of them
	// together.
	Limits Limits
	Budget *Budget
	// Placeholder returns the placeholder of a credential (role: "" for
	// its value, or its access key id's) in an incarnation
	// (secrets.Keyring.Placeholder); Secret a tenant's secret's value, read for
	// each request that injects it; OnUse is told of each injection and
	// each refusal of a placeholder (it must not block). Without
	// Placeholder, a sandbox with credentials does not start.
	Placeholder func(id string, generation int64, credential, role string) string
	Secret      func(ctx context.Context, tenant, name string) ([]byte, error)
	OnUse       func(Use)
	// OnDenied is told of each refused or audited decision, with the
	// sandbox's id and current name (it must not block): the ledger.
	OnDenied func(Decision)

	mu    sync.Mutex
	boxes map[string]*box
}

// box is one sandbox's proxy and what it decided.
type box struct {
	name   string
	tenant string // fixed: a sandbox never changes tenant
	proxy  *Proxy
	rules  []policy.NetworkPolicy
	creds  []policy.Credential

	gen int64        // the incarnation served
	ns  [2]uint64    // the device and inode of its network namespace
	ln  net.Listener // nil: not served

	logSecond time.Time // the second logged counts
	logged    int       // lines logged in it
	unlogged  int       // refusals not logged since the last line
}

// Prepare implements driver.Egress: it makes the sandbox's CA once and
// writes its trust directory, or mends them (see ca).
func (s *Sandboxes) Prepare(id string) (string, error) {
	_, trust, err := s.ca(id)
	return trust, err
}

// ca loads or makes the CA of sandbox id and its trust directory. Its
// files are written without an fsync (seven on a first start): what a
// crash of the machine leaves of them, ca finds and mends. A CA that does
// not load (missing, empty, a part, a key of another write) is made
// anew: the sandbox's processes that trusted the old one did not outlive
// the crash, and each start mounts the bundle again. A bundle that does
// not end with the CA is written again.
func (s *Sandboxes) ca(id string) (*CA, string, error) {
	dir := filepath.Join(s.Dir, id)
	trust := filepath.Join(dir, "trust")
	certPEM, cerr := os.ReadFile(filepath.Join(trust, driver.CAFile))
	keyPEM, kerr := os.ReadFile(filepath.Join(dir, "key.pem"))
	var ca *CA
	if cerr == nil && kerr == nil {
		var err error
		if ca, err = LoadCA(certPEM, keyPEM); err != nil && s.Logger != nil {
			s.Logger.Warn("egress: the sandbox's CA does not load; making another", "id", id, "err", err)
		}
	}
	if ca == nil {
		var err error
		if ca, certPEM, err = s.newCA(id, dir, trust); err != nil {
			return nil, "", err
		}
	}
	if !endsWith(filepath.Join(trust, driver.BundleFile), certPEM) {
		if err := s.writeBundle(trust, certPEM); err != nil {
			return nil, "", err
		}
	}
	return ca, trust, nil
}

// newCA makes the CA of sandbox id, its key in dir and its certificate in
// trust, and returns it and the certificate.
func (s *Sandboxes) newCA(id, dir, trust string) (*CA, []byte, error) {
	if err := os.MkdirAll(trust, 0o755); err != nil {
		return nil, nil, err
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, nil, err
	}
	ca, err := NewCA("corral egress CA " + id)
	if err != nil {
		return nil, nil, err
	}
	certPEM, keyPEM := ca.PEM()
	if err := atomicfile.WriteVolatile(filepath.Join(dir, "key.pem"), keyPEM, 0o600); err != nil {
		return nil, nil, err
	}
	if err := atomicfile.WriteVolatile(filepath.Join(trust, driver.CAFile), certPEM, 0o644); err != nil {
		return nil, nil, err
	}
	return ca, certPEM, nil
}

// endsWith says whether the file at path ends with tail.
func endsWith(path string, tail []byte) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || fi.Size() < int64(len(tail)) {
		return false
	}
	got := make([]byte, len(tail))
	if _, err := f.ReadAt(got, fi.Size()-int64(len(tail))); err != nil {
		return false
	}
	return bytes.Equal(got, tail)
}

// writeBundle writes the trust directory's bundle: the host's CAs, then
// the sandbox's.
// The host's bundle (~200 KiB) is copied file to file, in the kernel.
func (s *Sandboxes) writeBundle(trust string, certPEM []byte) error {
	bundle := io.Reader(bytes.NewReader(certPEM))
	if s.HostBundle != "" {
		if host, err := os.Open(s.HostBundle); err == nil {
			defer host.Close()
			bundle = io.MultiReader(host, bytes.NewReader([]byte{'\n'}), bundle)
		}
	}
	return atomicfile.WriteVolatileFrom(filepath.Join(trust, driver.BundleFile), bundle, 0o644)
}

// Attach implements driver.Egress: it serves the sandbox's proxy inside
// the network namespace at path, unless it is served there already.
func (s *Sandboxes) Attach(ctx context.Context, ref driver.Ref, path string) error {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return fmt.Errorf("egress: the network namespace: %w", err)
	}
	ns := [2]uint64{uint64(st.Dev), st.Ino}
	b, err := s.box(ctx, ref.ID)
	if err != nil {
		return err
	}
	s.mu.Lock()
	served := b.ln != nil && b.ns == ns
	s.mu.Unlock()
	if served {
		return nil
	}
	ln, err := netns.Listen(path, driver.ProxyAddr)
	if err != nil {
		return fmt.Errorf("egress: %w", err)
	}
	s.mu.Lock()
	if old := b.ln; old != nil {
		old.Close()
	}
	b.ln, b.ns, b.gen = ln, ns, ref.Generation
	creds := b.creds
	s.mu.Unlock()
	b.proxy.SetBindings(s.bindings(ref, creds))
	go func() {
		_ = b.proxy.Serve(ln)
		s.mu.Lock()
		if b.ln == ln {
			b.ln = nil
		}
		s.mu.Unlock()
	}()
	return nil
}

// Env implements driver.Egress: EgressEnv, and a placeholder in each
// variable the sandbox's credentials name.
func (s *Sandboxes) Env(ref driver.Ref, creds []policy.Credential) ([]string, error) {
	if len(creds) > 0 && s.Placeholder == nil {
		return nil, fmt.Errorf("egress: this gateway cannot give credentials placeholders")
	}
	return s.env(driver.EgressEnv(), ref, creds), nil
}

// env is base and a placeholder in each variable creds name.
func (s *Sandboxes) env(base []string, ref driver.Ref, creds []policy.Credential) []string {
	env := base
	for _, b := range s.bindings(ref, creds) {
		if b.Env != "" {
			env = append(env, b.Env+"="+b.Placeholder)
		}
		if v := b.Inject.SigV4; v != nil && v.Env != "" {
			env = append(env, v.Env+"="+b.KeyIDPlaceholder)
		}
	}
	return env
}

// bindings are credentials with the placeholders of incarnation ref.
func (s *Sandboxes) bindings(ref driver.Ref, creds []policy.Credential) []Binding {
	if s.Placeholder == nil {
		return nil
	}
	out := make([]Binding, len(creds))
	for i, c := range creds {
		out[i] = Binding{Credential: c, Placeholder: s.Placeholder(ref.ID, ref.Generation, c.Name, "")}
		if c.Inject.SigV4 != nil {
			out[i].KeyIDPlaceholder = s.Placeholder(ref.ID, ref.Generation, c.Name, roleKeyID)
		}
	}
	return out
}

// used passes a use of sandbox id's credentials on, with the sandbox's
// id and current name.
func (s *Sandboxes) used(id string, b *box, u Use) {
	if s.OnUse == nil {
		return
	}
	s.mu.Lock()
	u.SandboxID, u.Sandbox = id, b.name
	s.mu.Unlock()
	u.Tenant = b.tenant
	metrics.CredentialUse(u.Secret, u.Verdict)
	s.OnUse(u)
}

// box returns the proxy of sandbox id, made from its record on first use.
func (s *Sandboxes) box(ctx context.Context, id string) (*box, error) {
	s.mu.Lock()
	b := s.boxes[id]
	s.mu.Unlock()
	if b != nil {
		return b, nil
	}
	nw, err := s.Lookup(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("egress: the rules of sandbox %s: %w", id, err)
	}
	hosts, err := pins(nw.Hosts)
	if err != nil {
		return nil, err
	}
	ca, _, err := s.ca(id)
	if err != nil {
		return nil, fmt.Errorf("egress: the CA of sandbox %s: %w", id, err)
	}
	b = &box{name: nw.Name, tenant: nw.Tenant, rules: nw.Rules, creds: nw.Credentials}
	var secret func(context.Context, string) ([]byte, error)
	if s.Secret != nil {
		secret = func(ctx context.Context, name string) ([]byte, error) { return s.Secret(ctx, nw.Tenant, name) }
	}
	b.proxy, err = New(Config{Sandbox: nw.Name, Rules: nw.Rules, Hosts: hosts, CA: ca, Deny: s.Deny,
		OnDecision: func(d Decision) { s.record(id, b, d) }, LogAllowed: true, Limits: s.Limits, Budget: s.Budget,
		Secret: secret, OnUse: func(u Use) { s.used(id, b, u) }})
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.boxes == nil {
		s.boxes = map[string]*box{}
	}
	if cur := s.boxes[id]; cur != nil { // another attach made it meanwhile
		b.proxy.Close()
		return cur, nil
	}
	s.boxes[id] = b
	return b, nil
}

// pins parses add_hosts.
func pins(hosts []string) (map[string][]netip.Addr, error) {
	out := map[string][]netip.Addr{}
	for _, h := range hosts {
		name, ip, _ := strings.Cut(h, ":")
		a, err := netip.ParseAddr(ip)
		if err != nil {
			return nil, fmt.Errorf("egress: add_host %q: %w", h, err)
		}
		out[name] = append(out[name], a)
	}
	return out, nil
}

// record counts a decision of sandbox id and, unless it allowed, logs it
// and passes it to OnDenied.
func (s *Sandboxes) record(id string, b *box, d Decision) {
	s.mu.Lock()
	d.SandboxID, d.Sandbox = id, b.name // a claimed pool member's new name, not the one it was served under
	metrics.EgressDecision(d.Sandbox, d.Verdict)
	if d.Verdict == Allowed {
		s.mu.Unlock()
		return
	}
	s.log(b, d)
	s.mu.Unlock()
	if s.OnDenied != nil {
		s.OnDenied(d)
	}
}

// log logs a refusal, at most loggedPerSecond a second per sandbox; the
// first line after a second past the bound says how many were not logged.
// s.mu is held.
func (s *Sandboxes) log(b *box, d Decision) {
	if s.Logger == nil {
		return
	}
	if now := d.Time.Truncate(time.Second); !now.Equal(b.logSecond) {
		b.logSecond, b.logged = now, 0
	}
	if b.logged >= loggedPerSecond {
		b.unlogged++
		return
	}
	b.logged++
	args := []any{"sandbox", d.Sandbox, "host", d.Host, "port", d.Port, "method", d.Method,
		"path", d.Path, "policy", d.Policy, "reason", d.Reason}
	if b.unlogged > 0 {
		args = append(args, "not_logged_before", b.unlogged)
		b.unlogged = 0
	}
	s.Logger.Info("egress "+d.Verdict, args...)
}

// Attached reports whether incarnation ref's proxy is served.
func (s *Sandboxes) Attached(ref driver.Ref) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.boxes[ref.ID]
	return b != nil && b.ln != nil && b.gen == ref.Generation
}

// Refresh reads sandbox id's rules (and name) again and gives the rules to
// its proxy, which closes the open connections they no longer allow.
func (s *Sandboxes) Refresh(id string) {
	s.mu.Lock()
	b := s.boxes[id]
	s.mu.Unlock()
	if b == nil {
		return // not served: the next attach reads them
	}
	nw, err := s.Lookup(context.Background(), id)
	if err != nil {
		if s.Logger != nil {
			s.Logger.Error("egress: read the new rules", "sandbox", b.name, "err", err)
		}
		return
	}
	s.mu.Lock()
	b.rules, b.creds, b.name = nw.Rules, nw.Credentials, nw.Name
	ref := driver.Ref{ID: id, Generation: b.gen}
	s.mu.Unlock()
	b.proxy.SetBindings(s.bindings(ref, nw.Credentials))
	b.proxy.SetRules(nw.Rules)
}

// Forget closes the proxy of a deleted sandbox and removes its CA.
func (s *Sandboxes) Forget(id string) {
	s.mu.Lock()
	b := s.boxes[id]
	delete(s.boxes, id)
	s.mu.Unlock()
	if b != nil {
		b.proxy.Close()
	}
	if err := os.RemoveAll(filepath.Join(s.Dir, id)); err != nil && s.Logger != nil {
		s.Logger.Error("egress: remove the CA of a deleted sandbox", "id", id, "err", err)
	}
}

// InForce describes the rules sandbox id's proxy holds, or those its
// record has when it is not served.
func (s *Sandboxes) InForce(ctx context.Context, id string) string {
	s.mu.Lock()
	b := s.boxes[id]
	var rules []policy.NetworkPolicy
	var creds []policy.Credential
	served := b != nil && b.ln != nil
	if b != nil {
		rules, creds = b.rules, b.creds
	}
	s.mu.Unlock()
	if b == nil {
		nw, err := s.Lookup(ctx, id)
		if err != nil {
			return ""
		}
		rules, creds = nw.Rules, nw.Credentials
	}
	out := Describe(rules) + describeCredentials(creds)
	if !served {
		out += " (not served: the sandbox does not run)"
	}
	return out
}

// describeCredentials sums credentials up: each one's secret, where it
// goes and to which endpoints ("" for none).
func describeCredentials(creds []policy.Credential) string {
	var parts []string
	for _, c := range creds {
		where := "basic auth"
		switch in := c.Inject; {
		case in.SigV4 != nil:
			where = "AWS SigV4"
		case in.Header != "":
			where = "header " + in.Header
		case in.Query != "":
			where = "query " + in.Query
		}
		var eps []string
		for _, e := range c.Endpoints {
			eps = append(eps, e.Host+":"+portList(e.Ports))
		}
		parts = append(parts, fmt.Sprintf("%s (secret %s, %s) to %s", c.Name, c.Secret, where, strings.Join(eps, ", ")))
	}
	if len(parts) == 0 {
		return ""
	}
	return "; credentials: " + strings.Join(parts, "; ")
}

// Describe sums network rules up on one line: "deny all", or each
// policy's endpoints and how they are checked.
func Describe(rules []policy.NetworkPolicy) string {
	if len(rules) == 0 {
		return "deny all"
	}
	var parts []string
	for _, np := range rules {
		var eps []string
		for _, e := range np.Endpoints {
			how := "pass-through"
			switch {
			case len(e.Rules) > 0 || len(e.DenyRules) > 0:
				how = fmt.Sprintf("%d rules, %d deny rules", len(e.Rules), len(e.DenyRules))
			case e.Access != "":
				how = e.Access
			}
			if e.Enforcement == policy.Audit {
				how += ", audit"
			}
			eps = append(eps, fmt.Sprintf("%s:%s (%s)", e.Host, portList(e.Ports), how))
		}
		parts = append(parts, np.Name+": "+strings.Join(eps, ", "))
	}
	return strings.Join(parts, "; ")
}

// portList writes ports as "80,443".
func portList(ports []int) string {
	out := make([]string, len(ports))
	for i, p := range ports {
		out[i] = fmt.Sprint(p)
	}
	return strings.Join(out, ",")
}
