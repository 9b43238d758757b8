package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
	"github.com/corral-sandbox/corral/internal/testenv"
)

// egressServers are the test's own servers, on loopback: one HTTP, one
// HTTPS whose certificate (for allowed.test and denied.test) a CA of the
// test's signs, which the gateway trusts through SSL_CERT_FILE.
type egressServers struct {
	httpPort, httpsPort string
	received            *received
}

// received are the requests the servers answered, bodies read.
type received struct {
	mu   sync.Mutex
	reqs []*http.Request
}

// take returns the requests received so far and forgets them.
func (r *received) take() []*http.Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.reqs
	r.reqs = nil
	return out
}

func startEgressServers(t *testing.T) egressServers {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "corral egress test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leafDER, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{SerialNumber: big.NewInt(2),
		Subject: pkix.Name{CommonName: "allowed.test"}, DNSNames: []string{"allowed.test", "denied.test", "api.test", "other.test", "s3.test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(t.TempDir(), "test-ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SSL_CERT_FILE", caFile) // the gateway's proxy verifies the real server with it

	rec := &received{}
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		seen := r.Clone(context.Background())
		seen.Body = io.NopCloser(strings.NewReader(string(body)))
		rec.mu.Lock()
		rec.reqs = append(rec.reqs, seen)
		rec.mu.Unlock()
		fmt.Fprintf(w, "hello %s from %s\n", r.Method, r.Host)
	})
	mux.HandleFunc("/stream", func(w http.ResponseWriter, r *http.Request) {
		for i := 0; i < 600 && r.Context().Err() == nil; i++ { // at most a minute
			fmt.Fprintln(w, "tick")
			w.(http.Flusher).Flush()
			time.Sleep(100 * time.Millisecond)
		}
	})
	plain := httptest.NewServer(mux)
	t.Cleanup(plain.Close)
	secure := httptest.NewUnstartedServer(mux)
	secure.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{leafDER}, PrivateKey: key}}}
	secure.StartTLS()
	t.Cleanup(secure.Close)
	port := func(s *httptest.Server) string { return strconv.Itoa(s.Listener.Addr().(*net.TCPAddr).Port) }
	return egressServers{httpPort: port(plain), httpsPort: port(secure), received: rec}
}

// buildProbe builds testdata/egressprobe, static, for the sandbox.
func buildProbe(t *testing.T) string { return buildTestProgram(t, "egressprobe") }

// buildTestProgram builds testdata/NAME, static, for the sandbox.
func buildTestProgram(t *testing.T, name string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), name)
	cmd := exec.Command("go", "build", "-o", out, "./testdata/"+name)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the probe: %v\n%s", err, msg)
	}
	return out
}

// putProbe copies the probe into the sandbox's /sandbox through exec.
func putProbe(t *testing.T, home, box, probe string) { putProgram(t, home, box, probe, "probe") }

// putProgram copies a program into the sandbox's /sandbox/NAME through
// exec.
func putProgram(t *testing.T, home, box, probe, name string) {
	t.Helper()
	data, err := os.ReadFile(probe)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--home", home, "sandbox", "exec", "-i", box, "--", "sh", "-c", "cat > /sandbox/"+name+" && chmod 755 /sandbox/"+name)
	cmd.Stdin = strings.NewReader(string(data))
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("copy the probe into %s: %v\n%s", box, err, msg)
	}
}

// probe runs the probe in the sandbox and returns its output.
func probe(t *testing.T, home, box string, args ...string) string {
	t.Helper()
	out, errOut, _ := corral(t, home, append([]string{"sandbox", "exec", box, "--", "/sandbox/probe"}, args...)...)
	return strings.TrimSpace(out + errOut)
}

func egressPolicy(t *testing.T, host, port, more string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "policy.yaml")
	text := fmt.Sprintf(`version: 1
network_policies:
  test:
    endpoints:
      - host: %s
        ports: [%s]
        access: read-only
        allowed_ips: [127.0.0.0/8]
%s`, host, port, more)
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// A sandbox reaches what its network_policies allow, through its proxy,
// and nothing else, with each refusal reported; on each driver.
func TestEgressOnNative(t *testing.T) {
	testenv.RequireRoot(t)
	srv := startEgressServers(t)
	home := t.TempDir()
	metrics := freePort(t)
	nativeGateway(t, home, "--metrics-listen", metrics)
	egressChecks(t, home, srv, metrics[strings.LastIndex(metrics, ":")+1:], "")
}

func TestEgressOnDocker(t *testing.T) { egressOnDocker(t, "") }

// Issue 18: egress on the gVisor tier, as on the namespaces tier.
func TestEgressOnDockerGVisor(t *testing.T) { egressOnDocker(t, "gvisor") }

func egressOnDocker(t *testing.T, tier string) {
	testenv.RequireDocker(t)
	testenv.RequireRoot(t)
	srv := startEgressServers(t)
	home := t.TempDir()
	metrics := freePort(t)
	dockerGateway(t, home, newLabel(t), "--metrics-listen", metrics)
	egressChecks(t, home, srv, metrics[strings.LastIndex(metrics, ":")+1:], tier)
}

// onTier adds isolation: tier to the policy file at path, unless tier is
// empty.
func onTier(t *testing.T, path, tier string) string {
	t.Helper()
	if tier == "" {
		return path
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err == nil {
		_, err = fmt.Fprintf(f, "isolation: %s\n", tier)
		err = errors.Join(err, f.Close())
	}
	if err != nil {
		t.Fatal(err)
	}
	return path
}

func egressChecks(t *testing.T, home string, srv egressServers, metricsPort, tier string) {
	probeBin := buildProbe(t)
	ports := srv.httpPort + ", " + srv.httpsPort
	pol := onTier(t, egressPolicy(t, "allowed.test", ports, fmt.Sprintf(`  metrics:
    endpoints:
      - host: metrics.test
        port: %s
`, metricsPort)), tier)
	mustCorral(t, home, "sandbox", "create", "--name", "eg", "--policy", pol,
		"--add-host", "allowed.test:127.0.0.1", "--add-host", "denied.test:127.0.0.1", "--add-host", "metrics.test:127.0.0.1",
		"--", "sleep", "1d")
	putProbe(t, home, "eg", probeBin)

	for _, url := range []string{"http://allowed.test:" + srv.httpPort + "/x", "https://allowed.test:" + srv.httpsPort + "/x"} {
		if got := probe(t, home, "eg", "get", url); got != "200 hello GET from allowed.test:"+url[strings.LastIndex(url, ":")+1:len(url)-2] {
			t.Errorf("GET %s through the proxy: %q", url, got)
		}
		if got := probe(t, home, "eg", "post", url); !strings.HasPrefix(got, "403 ") || !strings.Contains(got, "test") {
			t.Errorf("POST %s (read-only): %q; want a 403 that names the policy", url, got)
		}
	}
	if got := probe(t, home, "eg", "get", "http://denied.test:"+srv.httpPort+"/"); !strings.HasPrefix(got, "403 ") {
		t.Errorf("GET of denied.test: %q; want 403", got)
	}
	if got := probe(t, home, "eg", "get", "https://denied.test:"+srv.httpsPort+"/"); !strings.Contains(got, "Forbidden") {
		t.Errorf("HTTPS to denied.test: %q; want its CONNECT refused with 403 Forbidden", got)
	}
	if got := probe(t, home, "eg", "get", "http://metrics.test:"+metricsPort+"/metrics"); !strings.HasPrefix(got, "403 ") {
		t.Errorf("the gateway's metrics port on loopback, not in allowed_ips: %q; want 403", got)
	}
	if got := probe(t, home, "eg", "dial", "127.0.0.1:"+srv.httpPort); !strings.HasPrefix(got, "refused after") {
		t.Errorf("a direct connection to the server's address: %q; want it refused", got)
	}

	var denials []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(mustCorral(t, home, "sandbox", "denials", "eg", "-o", "json")), "\n") {
		var d map[string]any
		if err := json.Unmarshal([]byte(line), &d); err != nil {
			t.Fatalf("denials -o json line %q: %v", line, err)
		}
		denials = append(denials, d)
	}
	seen := map[string]bool{}
	for _, d := range denials {
		seen[fmt.Sprint(d["host"], " ", d["method"])] = true
	}
	for _, want := range []string{"allowed.test POST", "denied.test GET", "metrics.test GET"} {
		if !seen[want] {
			t.Errorf("denials lack %q: %v", want, denials)
		}
	}
	resp, err := http.Get("http://127.0.0.1:" + metricsPort + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`corral_egress_decisions_total{sandbox="eg",verdict="denied"}`, `corral_egress_decisions_total{sandbox="eg",verdict="allowed"}`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if out := mustCorral(t, home, "sandbox", "get", "eg"); !strings.Contains(out, "network: test: allowed.test:") {
		t.Errorf("get does not show the rules in force:\n%s", out)
	}

	// policy set: allowed.test is refused and denied.test allowed at once,
	// an open connection to allowed.test is closed, the main process stays.
	hold := exec.Command(bin, "--home", home, "sandbox", "exec", "eg", "--", "/sandbox/probe", "hold", "https://allowed.test:"+srv.httpsPort+"/stream")
	holdOut := &testenv.SyncBuffer{}
	hold.Stdout, hold.Stderr = holdOut, holdOut
	if err := hold.Start(); err != nil {
		t.Fatal(err)
	}
	defer hold.Process.Kill()
	testenv.Eventually(t, 10*time.Second, func() error {
		if !strings.Contains(holdOut.String(), "holding 200") {
			return fmt.Errorf("the held connection: %q", holdOut.String())
		}
		return nil
	})
	before := getJSON(t, home, "eg")["generation"]
	mustCorral(t, home, "sandbox", "policy", "set", "eg", "--file", onTier(t, egressPolicy(t, "denied.test", ports, ""), tier))
	set := time.Now()
	held := make(chan error, 1)
	go func() { held <- hold.Wait() }()
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatalf("the open connection to allowed.test was not closed after policy set: %q", holdOut.String())
	}
	t.Logf("the open connection closed %s after policy set: %s", time.Since(set).Round(time.Millisecond), strings.TrimSpace(holdOut.String()))
	if got := probe(t, home, "eg", "get", "http://denied.test:"+srv.httpPort+"/y"); !strings.HasPrefix(got, "200 ") {
		t.Errorf("denied.test after policy set allowed it: %q", got)
	}
	if got := probe(t, home, "eg", "get", "http://allowed.test:"+srv.httpPort+"/y"); !strings.HasPrefix(got, "403 ") {
		t.Errorf("allowed.test after policy set refused it: %q", got)
	}
	if after := getJSON(t, home, "eg")["generation"]; after != before {
		t.Errorf("generation %v after policy set, %v before: the main process was restarted", after, before)
	}
	mustCorral(t, home, "sandbox", "delete", "eg")
}

// A gateway killed while sandboxes hold open
// connections takes the connections with it, leaves no route out while it
// is down, and the next gateway serves every sandbox's rules again; on
// native, a killed supervisor's next incarnation has them too.
func TestEgressAfterKillsOnNative(t *testing.T) {
	testenv.RequireRoot(t)
	egressAfterKills(t, func(home string) *gatewayProc { return nativeGateway(t, home) }, true)
}

func TestEgressAfterKillsOnDocker(t *testing.T) {
	testenv.RequireDocker(t)
	testenv.RequireRoot(t)
	label := newLabel(t)
	egressAfterKills(t, func(home string) *gatewayProc { return dockerGateway(t, home, label) }, false)
}

// rulesInForceAgain checks that box came back ready at generation 1 after
// what (a restart, a takeover) with its policy's rules in force: GET of
// allowed.test allowed, denied.test denied, POST refused (read-only).
func rulesInForceAgain(t *testing.T, home string, c corralv1.SandboxServiceClient, box, port, what string) {
	t.Helper()
	if sb := waitPhase(t, c, box, "ready"); sb.Generation != 1 {
		t.Fatalf("%s came back as generation %d after %s", box, sb.Generation, what)
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		if got := probe(t, home, box, "get", "http://allowed.test:"+port+"/after"); !strings.HasPrefix(got, "200 ") {
			return fmt.Errorf("%s: GET of allowed.test after %s: %q", box, what, got)
		}
		return nil
	})
	if got := probe(t, home, box, "get", "http://denied.test:"+port+"/after"); !strings.HasPrefix(got, "403 ") {
		t.Errorf("%s: denied.test after %s: %q; want the rules in force again", box, what, got)
	}
	if got := probe(t, home, box, "post", "http://allowed.test:"+port+"/after"); !strings.HasPrefix(got, "403 ") {
		t.Errorf("%s: POST after %s: %q; want read-only in force again", box, what, got)
	}
}

func egressAfterKills(t *testing.T, gateway func(home string) *gatewayProc, killSupervisor bool) {
	srv := startEgressServers(t)
	home := t.TempDir()
	g := gateway(home)
	probeBin := buildProbe(t)
	pol := egressPolicy(t, "allowed.test", srv.httpPort+", "+srv.httpsPort, "")
	const n = 3
	var holds []*exec.Cmd
	var outs []*testenv.SyncBuffer
	for i := range n {
		box := fmt.Sprintf("k%d", i)
		mustCorral(t, home, "sandbox", "create", "--name", box, "--policy", pol,
			"--add-host", "allowed.test:127.0.0.1", "--add-host", "denied.test:127.0.0.1", "--", "sleep", "1d")
		putProbe(t, home, box, probeBin)
		hold := exec.Command(bin, "--home", home, "sandbox", "exec", box, "--", "/sandbox/probe", "hold", "https://allowed.test:"+srv.httpsPort+"/stream")
		out := &testenv.SyncBuffer{}
		hold.Stdout, hold.Stderr = out, out
		if err := hold.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = hold.Process.Kill(); _ = hold.Wait() })
		holds, outs = append(holds, hold), append(outs, out)
	}
	for i := range n {
		testenv.Eventually(t, 10*time.Second, func() error {
			if !strings.Contains(outs[i].String(), "holding 200") {
				return fmt.Errorf("k%d's held connection: %q", i, outs[i].String())
			}
			return nil
		})
	}
	g.signal(syscall.SIGKILL)
	g.exitCode(10 * time.Second)
	// The exec streams went with the gateway too; what the sandboxes see
	// is checked from inside with a direct exec after the restart, and
	// here from the host: no process of the sandbox can reach the proxy.
	for i := range n {
		_ = holds[i].Wait()
	}
	if killSupervisor { // native: look into each sandbox's namespace from the host
		for _, pid := range supervisorPids(t, home) {
			out, err := exec.Command("nsenter", fmt.Sprintf("--net=/proc/%d/ns/net", pid), "/bin/busybox", "nc", "127.0.0.1", "999").CombinedOutput()
			if err == nil || !strings.Contains(string(out), "refused") {
				t.Errorf("the proxy's port in the namespace of supervisor %d while the gateway is down: %v %q; want refused", pid, err, out)
			}
		}
	}

	gateway(home)
	c := api(t, home)
	for i := range n {
		rulesInForceAgain(t, home, c, fmt.Sprintf("k%d", i), srv.httpPort, "the restart")
	}
	if killSupervisor {
		pids := supervisorPids(t, home)
		if err := syscall.Kill(pids[0], syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		var victim string
		testenv.Eventually(t, 30*time.Second, func() error {
			for i := range n {
				if v := getJSON(t, home, fmt.Sprintf("k%d", i)); v["phase"] == "error" {
					victim = fmt.Sprintf("k%d", i)
					return nil
				}
			}
			return fmt.Errorf("no sandbox in error after its supervisor was killed")
		})
		mustCorral(t, home, "sandbox", "start", victim)
		putProbe(t, home, victim, probeBin) // /sandbox is kept, but the probe is checked anew
		if got := probe(t, home, victim, "get", "http://denied.test:"+srv.httpPort+"/"); !strings.HasPrefix(got, "403 ") {
			t.Errorf("%s's next incarnation: denied.test %q; want refused", victim, got)
		}
		if got := probe(t, home, victim, "get", "http://allowed.test:"+srv.httpPort+"/"); !strings.HasPrefix(got, "200 ") {
			t.Errorf("%s's next incarnation: allowed.test %q; want allowed", victim, got)
		}
	}
	mustCorral(t, home, "sandbox", "delete", "--all")
}

func TestEgressFloodOnNative(t *testing.T) {
	testenv.RequireRoot(t)
	egressFlood(t, func(home string) *gatewayProc { return nativeGateway(t, home) })
}

func TestEgressFloodOnDocker(t *testing.T) {
	testenv.RequireDocker(t)
	testenv.RequireRoot(t)
	label := newLabel(t)
	egressFlood(t, func(home string) *gatewayProc { return dockerGateway(t, home, label) })
}

// A sandbox without network permission floods its egress proxy with
// connections, each with a refused request of a 60 KiB path, and keeps
// them: the gateway holds a bounded number of descriptors for it, and
// `sandbox list` and another sandbox's exec keep answering throughout.
func egressFlood(t *testing.T, gateway func(home string) *gatewayProc) {
	home := t.TempDir()
	g := gateway(home)
	mustCorral(t, home, "sandbox", "create", "--name", "flooder", "--", "sleep", "1000")
	mustCorral(t, home, "sandbox", "create", "--name", "bystander", "--", "sleep", "1000")
	putProbe(t, home, "flooder", buildProbe(t))
	files := func() int {
		ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", g.cmd.Process.Pid))
		return len(ents)
	}
	before := files()
	done := make(chan string, 1)
	go func() {
		out, errOut, _ := corral(t, home, "sandbox", "exec", "flooder", "--", "/sandbox/probe", "flood", "3000")
		done <- out + errOut
	}()
	var slowest time.Duration
	most, rounds := 0, 0
	for flooding := true; flooding; rounds++ {
		select {
		case out := <-done:
			flooding = false
			t.Logf("the flood: %s", strings.TrimSpace(out))
		case <-time.After(200 * time.Millisecond):
		}
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := api(t, home).ListSandboxes(ctx, &corralv1.ListSandboxesRequest{})
		cancel()
		if err != nil {
			t.Fatalf("sandbox list during the flood: %v", err)
		}
		if out, errOut, code := corral(t, home, "sandbox", "exec", "bystander", "--", "true"); code != 0 {
			t.Fatalf("another sandbox's exec during the flood: exit %d\n%s%s", code, out, errOut)
		}
		slowest = max(slowest, time.Since(start))
		most = max(most, files()-before)
	}
	t.Logf("%d rounds of list and exec during the flood: the slowest took %s; the gateway held at most %d more descriptors", rounds, slowest.Round(time.Millisecond), most)
	if slowest > 3*time.Second {
		t.Errorf("a list and an exec took %s during the flood; want them answering within a second or so", slowest)
	}
	if limit := 2*256 + 64; most > limit {
		t.Errorf("the gateway held %d more descriptors during the flood; want at most %d (the sandbox's 256 connections, each with at most one upstream)", most, limit)
	}
}
