package main

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
	"github.com/corral-sandbox/corral/internal/driver/fake"
	"github.com/corral-sandbox/corral/internal/testenv"
	"github.com/corral-sandbox/corral/internal/tlsauth"
)

// replicaSet is gateways on one home and one PostgreSQL store, each with
// a TLS address of its own, and an admin's certificate to call them.
type replicaSet struct {
	t     *testing.T
	home  string
	certs string
	addrs []string
	procs []*gatewayProc
	env   []string // the CLI's, with a context per replica
}

func newReplicaSet(t *testing.T, store string, n int, args ...string) *replicaSet {
	t.Helper()
	rs := &replicaSet{t: t, home: t.TempDir(), certs: t.TempDir(),
		env: []string{"CORRAL_CONFIG=" + filepath.Join(t.TempDir(), "config"), "CORRAL_HOME="}}
	for i := range n {
		rs.addrs = append(rs.addrs, freePort(t))
		all := append([]string{"--store", store, "--listen", rs.addrs[i]}, args...)
		if i == 0 {
			rs.procs = append(rs.procs, startGateway(t, rs.home, all...))
			mustCorral(t, rs.home, "gateway", "client-cert", "ops", "--role", "admin", "--out", rs.certs)
		} else {
			rs.procs = append(rs.procs, launch(t, rs.home, all...))
		}
	}
	for i, addr := range rs.addrs {
		mustCorralEnv(t, rs.env, "context", "add", fmt.Sprint("r", i), "--gateway", "https://"+addr, "--ca", filepath.Join(rs.certs, "ca.crt"),
			"--cert", filepath.Join(rs.certs, "ops.crt"), "--key", filepath.Join(rs.certs, "ops.key"))
	}
	// every replica answers, and says there are n
	for i := range rs.addrs {
		if err := testenv.Until(30*time.Second, func() error {
			list, err := rs.replicas(i)
			if err == nil && len(list) != n {
				err = fmt.Errorf("%d replicas listed", len(list))
			}
			return err
		}); err != nil {
			t.Fatalf("replica %d: %v\n%s", i, err, rs.procs[i].logs.String())
		}
	}
	return rs
}

// api is a client of replica i's TLS address, as the admin ops.
func (rs *replicaSet) api(i int) corralv1.SandboxServiceClient { return rs.apiAs(i, "ops") }

// apiAs is a client of replica i's TLS address with the certificate name
// (made in rs.certs).
func (rs *replicaSet) apiAs(i int, name string) corralv1.SandboxServiceClient {
	rs.t.Helper()
	cfg, err := tlsauth.ClientConfig(filepath.Join(rs.certs, "ca.crt"), filepath.Join(rs.certs, name+".crt"), filepath.Join(rs.certs, name+".key"))
	if err != nil {
		rs.t.Fatal(err)
	}
	conn, err := grpc.NewClient(rs.addrs[i], grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		rs.t.Fatal(err)
	}
	rs.t.Cleanup(func() { conn.Close() })
	return corralv1.NewSandboxServiceClient(conn)
}

func (rs *replicaSet) replicas(i int) ([]*corralv1.Replica, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	resp, err := rs.api(i).ListReplicas(ctx, &corralv1.ListReplicasRequest{})
	return resp.GetReplicas(), err
}

// cli runs the CLI against replica i.
func (rs *replicaSet) cli(i int, args ...string) string {
	rs.t.Helper()
	return mustCorralEnv(rs.t, rs.env, append([]string{"--context", fmt.Sprint("r", i)}, args...)...)
}

// Three replicas on one store: requests to a standby are served through
// the leader, a watch on a standby sees every change, and when the leader
// owning 100 running sandboxes is SIGKILLed another owns all of them
// within the lease's TTL and two seconds, none restarted; each is then
// exec'd into, stopped and deleted through the third; no driver call for a
// sandbox was made by two replicas at once, and the journal's entries say
// which lease wrote them.
func TestReplicasTakeOver(t *testing.T) {
	rs := newReplicaSet(t, testenv.PostgresDatabase(t, "replicas"), 3)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if list, _ := rs.replicas(2); !list[0].Leader || list[0].Pid != int64(rs.procs[0].cmd.Process.Pid) || list[0].Epoch < 1 {
		t.Fatalf("the first replica does not lead: %v", list)
	}
	first := mustList(t, rs)[0].Epoch
	// a member who claims to be a forwarded admin is the member still,
	// through a standby and at the leader's TLS address alike
	mustCorral(t, rs.home, "gateway", "client-cert", "bob", "--role", "member", "--out", rs.certs)
	claim := metadata.AppendToOutgoingContext(ctx, "corral-forwarded-caller", `{"Name":"root","Tenant":"default","Role":"admin","Every":true}`)
	for i := range 2 {
		if _, err := rs.apiAs(i, "bob").ListReplicas(claim, &corralv1.ListReplicasRequest{}); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "bob") {
			t.Errorf("a member claiming to be a forwarded admin at replica %d: %v", i, err)
		}
	}

	// a viewer's bearer token, through a standby: it lists, and may not create
	token := lastLine(mustCorral(t, rs.home, "token", "create", "--tenant", "default", "--role", "viewer", "--name", "watcher"))
	asViewer := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	if _, err := rs.apiAs(1, "bob").ListSandboxes(asViewer, &corralv1.ListSandboxesRequest{}); err != nil {
		t.Errorf("a viewer's token through a standby: %v", err)
	}
	if _, err := rs.apiAs(1, "bob").CreateSandbox(asViewer, &corralv1.CreateSandboxRequest{Name: "by-viewer"}); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "watcher") {
		t.Errorf("a viewer's create through a standby: %v", err)
	}

	// an agent's MCP session through a standby
	cfg, err := tlsauth.ClientConfig(filepath.Join(rs.certs, "ca.crt"), filepath.Join(rs.certs, "ops.crt"), filepath.Join(rs.certs, "ops.key"))
	if err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: "https://" + rs.addrs[1] + "/mcp",
		HTTPClient: &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: time.Minute}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	agent := mcpSession{t, cs}
	agent.must("sandbox_create", map[string]any{"name": "agent"})
	if out := agent.must("sandbox_exec", map[string]any{"name": "agent", "command": []string{"echo", "through", "a", "standby"}}); out["stdout"] != "through a standby\n" {
		t.Errorf("sandbox_exec over MCP through a standby: %v", out)
	}
	agent.must("sandbox_delete", map[string]any{"name": "agent"})
	cs.Close()

	watch, err := rs.api(2).WatchSandboxes(ctx, &corralv1.WatchSandboxesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	const n = 100
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := rs.api(1).CreateSandbox(ctx, &corralv1.CreateSandboxRequest{Name: fmt.Sprintf("r-%03d", i), Spec: &corralv1.SandboxSpec{Command: []string{"sleep", "1d"}}})
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("a create through a standby: %v", err)
		}
	}
	// the watch on the other standby sees each one become ready
	readyNames := map[string]bool{}
	for len(readyNames) < n {
		ev, err := watch.Recv()
		if err != nil {
			t.Fatalf("watch through a standby after %d ready: %v", len(readyNames), err)
		}
		if sb := ev.GetSandbox(); sb != nil && sb.Phase == "ready" {
			readyNames[sb.Name] = true
		}
	}
	if list := mustList(t, rs); list[0].Sandboxes != n {
		t.Errorf("the leader owns %d sandboxes, want %d", list[0].Sandboxes, n)
	}

	ttl := 10 * time.Second
	rs.procs[0].signal(syscall.SIGKILL)
	killed := time.Now()
	rs.procs[0].exitCode(10 * time.Second)
	var leader *corralv1.Replica
	if err := testenv.Until(ttl+5*time.Second, func() error {
		for i := 1; i < 3; i++ {
			list, err := rs.replicas(i)
			if err == nil && len(list) > 0 && list[0].Leader && list[0].Alive && list[0].Sandboxes == n && list[0].Epoch > first {
				leader = list[0]
				return nil
			}
		}
		return fmt.Errorf("no new leader owns the %d sandboxes", n)
	}); err != nil {
		t.Fatal(err)
	}
	took := time.Since(killed)
	t.Logf("a new leader (epoch %d) owns all %d sandboxes %v after the SIGKILL", leader.Epoch, n, took.Round(time.Millisecond))
	if took > ttl+2*time.Second {
		t.Errorf("the takeover took %v, more than the TTL and 2 s", took)
	}
	other := 1
	if leader.Pid == int64(rs.procs[1].cmd.Process.Pid) {
		other = 2
	}
	list, err := rs.api(other).ListSandboxes(ctx, &corralv1.ListSandboxesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, sb := range list.Sandboxes {
		if sb.Phase != "ready" || sb.Generation != 1 {
			t.Errorf("%s after the takeover: phase %s, generation %d", sb.Name, sb.Phase, sb.Generation)
		}
	}
	for i := range n {
		name := fmt.Sprintf("r-%03d", i)
		if i%10 == 0 {
			if out := rs.cli(other, "sandbox", "exec", name, "--", "echo", "hi", name); strings.TrimSpace(out) != "hi "+name {
				t.Errorf("exec in %s through the standby: %q", name, out)
			}
		}
	}
	rs.cli(other, "sandbox", "stop", "r-000")
	if out := rs.cli(other, "sandbox", "history", "r-000", "-o", "json"); !strings.Contains(out, fmt.Sprintf(`"epoch": %d`, first)) || !strings.Contains(out, fmt.Sprintf(`"epoch": %d`, leader.Epoch)) {
		t.Errorf("r-000's journal does not name both leases (%d, %d):\n%s", first, leader.Epoch, out)
	}
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := rs.api(other).DeleteSandbox(ctx, &corralv1.DeleteSandboxRequest{Name: fmt.Sprintf("r-%03d", i), Force: true}); err != nil {
				t.Errorf("delete through the standby: %v", err)
			}
		}()
	}
	wg.Wait()
	if err := testenv.Until(time.Minute, func() error {
		list, err := rs.api(other).ListSandboxes(ctx, &corralv1.ListSandboxesRequest{})
		if err == nil && len(list.Sandboxes) > 0 {
			err = fmt.Errorf("%d sandboxes left", len(list.Sandboxes))
		}
		return err
	}); err != nil {
		t.Error(err)
	}
	if overlaps, err := fake.Overlaps(filepath.Join(rs.home, "fake")); err != nil || len(overlaps) > 0 {
		t.Errorf("driver calls for one sandbox by two replicas at once: %q, %v", overlaps, err)
	}
}

func mustList(t *testing.T, rs *replicaSet) []*corralv1.Replica {
	t.Helper()
	for i := range rs.procs {
		if rs.procs[i].exited() {
			continue
		}
		if list, err := rs.replicas(i); err == nil {
			return list
		}
	}
	t.Fatal("no replica lists the replicas")
	return nil
}

// A leader cut off from PostgreSQL (its connections go silent, as in a
// partition) gives the lease up and exits before the server lets the
// standby take it; none of its writes lands after the cut, and the
// standby, once it leads, writes and drives as before.
func TestReplicaCutOffFromTheStore(t *testing.T) {
	store := testenv.PostgresDatabase(t, "partition")
	u, err := url.Parse(store)
	if err != nil {
		t.Fatal(err)
	}
	proxy := testenv.NewCutProxy(t, u.Host)
	cut := *u
	cut.Host = proxy.Addr()
	home := t.TempDir()
	leaderAddr, standbyAddr := freePort(t), freePort(t)
	leader := startGateway(t, home, "--store", cut.String(), "--listen", leaderAddr)
	mustCorral(t, home, "sandbox", "create", "--name", "before", "--", "sleep", "1d")
	standby := launch(t, home, "--store", store, "--listen", standbyAddr)
	if err := testenv.Until(30*time.Second, func() error {
		if !strings.Contains(standby.logs.String(), "standby: serving") {
			return fmt.Errorf("the standby is not serving")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	proxy.Cut()
	cutAt := time.Now()
	// a request to the cut-off leader now: it must not land
	go func() { _, _, _ = corral(t, home, "sandbox", "create", "--name", "after-the-cut") }()
	if code := leader.exitCode(30 * time.Second); code == 0 || !strings.Contains(leader.logs.String(), "lost the hold of the store") {
		t.Fatalf("the cut-off leader: exit %d", code)
	}
	exited := time.Since(cutAt)
	if err := testenv.Until(30*time.Second, func() error {
		if !strings.Contains(standby.logs.String(), `msg="gateway ready"`) {
			return fmt.Errorf("the standby has not taken over")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	tookOver := time.Since(cutAt)
	t.Logf("the cut-off leader exited %v after the cut; the standby led %v after it", exited.Round(time.Millisecond), tookOver.Round(time.Millisecond))
	if exited >= 10*time.Second {
		t.Errorf("the cut-off leader exited %v after the cut, not before the lease's 10 s", exited)
	}
	if sb := getJSON(t, home, "before"); sb["phase"] != "ready" || sb["generation"] != float64(1) {
		t.Errorf("before, after the takeover: phase %v, generation %v", sb["phase"], sb["generation"])
	}
	if _, errOut, code := corral(t, home, "sandbox", "get", "after-the-cut"); code == 0 || !strings.Contains(errOut, "not found") {
		t.Errorf("a create sent to the leader after the cut landed: exit %d %q", code, errOut)
	}
	db, err := sql.Open("pgx", store)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var late int
	if err := db.QueryRow(`SELECT count(*) FROM operations o JOIN lease l ON o.epoch < l.epoch
		WHERE o.started_at > $1`, cutAt.UnixNano()).Scan(&late); err != nil {
		t.Fatal(err)
	}
	if late != 0 {
		t.Errorf("%d journal writes of the cut-off leader's lease are dated after the cut", late)
	}
	mustCorral(t, home, "sandbox", "exec", "before", "--", "echo", "hi")
	mustCorral(t, home, "sandbox", "delete", "--force", "before")
}

// On native, the replica that takes over from a SIGKILLed leader of 100
// sandboxes with egress rules serves what it served: each one's rules (an allowed host allowed, a
// denied one denied, read-only kept) and its exposed port, at the same
// address; none was restarted.
func TestReplicaTakeOverServesEgressAndPortsOnNative(t *testing.T) {
	testenv.RequireRoot(t)
	store := testenv.PostgresDatabase(t, "native-replicas")
	srv := startEgressServers(t)
	home := t.TempDir()
	leader := nativeGateway(t, home, "--store", store)
	standby := launch(t, home, "--driver", "native", "--store", store)
	probeBin := buildProbe(t)
	pol := egressPolicy(t, "allowed.test", srv.httpPort, "")
	const n = 100
	for i := range n {
		box := fmt.Sprintf("e%d", i)
		mustCorral(t, home, "sandbox", "create", "--name", box, "--policy", pol,
			"--add-host", "allowed.test:127.0.0.1", "--add-host", "denied.test:127.0.0.1", "--", "sleep", "1d")
		putProbe(t, home, box, probeBin)
	}
	run := func(args ...string) string { return mustCorral(t, home, args...) }
	createWeb(t, run, "web")
	addr := strings.TrimSpace(run("sandbox", "expose", "web", "8080"))
	waitServed(t, addr, "hello from web\n")
	if !strings.Contains(standby.logs.String(), "standby") {
		t.Fatalf("the second replica is not in standby:\n%s", standby.logs.String())
	}

	leader.signal(syscall.SIGKILL)
	killed := time.Now()
	leader.exitCode(10 * time.Second)
	testenv.Eventually(t, 12*time.Second, func() error {
		if !strings.Contains(standby.logs.String(), `msg="gateway ready"`) {
			return fmt.Errorf("the standby has not taken over")
		}
		return nil
	})
	t.Logf("the standby serves %v after the SIGKILL of the leader of %d sandboxes", time.Since(killed).Round(time.Millisecond), n+1)
	if took := time.Since(killed); took > 12*time.Second {
		t.Errorf("the takeover took %v, more than the TTL and 2 s", took)
	}
	waitServed(t, addr, "hello from web\n")
	c := api(t, home)
	for i := range n {
		rulesInForceAgain(t, home, c, fmt.Sprintf("e%d", i), srv.httpPort, "the takeover")
	}
	if sb := getJSON(t, home, "web"); sb["generation"] != float64(1) {
		t.Errorf("web after the takeover: generation %v", sb["generation"])
	}
	run("sandbox", "delete", "--all")
}
