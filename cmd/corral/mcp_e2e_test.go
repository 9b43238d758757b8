package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
	"github.com/corral-sandbox/corral/internal/mcptools"
	"github.com/corral-sandbox/corral/internal/testenv"
	"github.com/corral-sandbox/corral/internal/tlsauth"
)

// mcpSession is an MCP client session of a test.
type mcpSession struct {
	t  *testing.T
	cs *mcp.ClientSession
}

// call calls a tool and returns its structured result, or the text of its
// tool error (isError).
func (s mcpSession) call(name string, args map[string]any) (map[string]any, string) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := s.cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		s.t.Fatalf("%s: %v", name, err)
	}
	if res.IsError {
		var text []string
		for _, c := range res.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				text = append(text, tc.Text)
			}
		}
		return nil, strings.Join(text, "\n")
	}
	out := map[string]any{}
	b, _ := json.Marshal(res.StructuredContent)
	_ = json.Unmarshal(b, &out)
	return out, ""
}

// must calls a tool that must succeed.
func (s mcpSession) must(name string, args map[string]any) map[string]any {
	s.t.Helper()
	out, toolErr := s.call(name, args)
	if toolErr != "" {
		s.t.Fatalf("%s %v: tool error %q", name, args, toolErr)
	}
	return out
}

// stdioSession runs `corral mcp --max-sandboxes 2` on a native gateway of
// its own and connects to it, as a desktop agent does.
func stdioSession(t *testing.T) (mcpSession, string, context.Context) {
	t.Helper()
	testenv.RequireRoot(t)
	home := t.TempDir()
	startGateway(t, home, "--driver", "native")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: exec.Command(bin, "--home", home, "mcp", "--max-sandboxes", "2")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return mcpSession{t, cs}, home, ctx
}

// An agent's session over stdio: the tools listed with their schemas, a
// sandbox created, commands run (argv, a shell string with env and cwd,
// output cut, a timeout), files written, read, listed and removed, the
// sandbox stopped, started and deleted.
func TestMCPOverStdio(t *testing.T) {
	s, _, ctx := stdioSession(t)
	cs := s.cs
	var names []string
	for tool, err := range cs.Tools(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		if tool.Description == "" || tool.InputSchema == nil {
			t.Errorf("tool %s has no description or schema", tool.Name)
		}
		names = append(names, tool.Name)
	}
	for _, want := range []string{"sandbox_create", "sandbox_list", "sandbox_get", "sandbox_exec", "sandbox_stop", "sandbox_start",
		"sandbox_pause", "sandbox_resume", "sandbox_delete", "sandbox_logs", "fs_read", "fs_write", "fs_list", "fs_stat", "fs_remove", "fs_mkdir", "port_expose",
		"sandbox_snapshot", "sandbox_fork", "snapshot_list", "snapshot_delete"} {
		if !slices.Contains(names, want) {
			t.Errorf("no tool %s among %v", want, names)
		}
	}

	if sb := s.must("sandbox_create", map[string]any{"name": "agent-1"}); sb["phase"] != "ready" {
		t.Fatalf("sandbox_create: %v; want it ready", sb)
	}
	out := s.must("sandbox_exec", map[string]any{"name": "agent-1", "command": []string{"echo", "hello", "agent"}})
	if out["stdout"] != "hello agent\n" || out["exit_code"] != float64(0) {
		t.Errorf("sandbox_exec echo: %v", out)
	}
	out = s.must("sandbox_exec", map[string]any{"name": "agent-1", "shell": "cd /tmp && echo $X $(pwd) >&2; exit 3", "env": map[string]string{"X": "x1"}})
	if out["stderr"] != "x1 /tmp\n" || out["exit_code"] != float64(3) {
		t.Errorf("sandbox_exec with a shell string and env: %v", out)
	}
	out = s.must("sandbox_exec", map[string]any{"name": "agent-1", "shell": "yes | head -c 100000", "max_output_bytes": 1000})
	if len(out["stdout"].(string)) != 1000 || out["truncated"] != true {
		t.Errorf("sandbox_exec past max_output_bytes: %d bytes, truncated %v", len(out["stdout"].(string)), out["truncated"])
	}
	out = s.must("sandbox_exec", map[string]any{"name": "agent-1", "command": []string{"sleep", "30"}, "timeout_seconds": 1})
	if out["timed_out"] != true {
		t.Errorf("sandbox_exec past its timeout: %v", out)
	}
	s.must("fs_write", map[string]any{"name": "agent-1", "path": "notes/plan.txt", "content": "step 1\n"})
	if got := s.must("fs_read", map[string]any{"name": "agent-1", "path": "/sandbox/notes/plan.txt"}); got["content"] != "step 1\n" || got["encoding"] != "utf-8" {
		t.Errorf("fs_read of what fs_write wrote: %v", got)
	}
	if got := s.must("sandbox_exec", map[string]any{"name": "agent-1", "command": []string{"cat", "notes/plan.txt"}, "cwd": "/sandbox"}); got["stdout"] != "step 1\n" {
		t.Errorf("the file as a command in the sandbox reads it: %v", got)
	}
	s.must("fs_write", map[string]any{"name": "agent-1", "path": "bin.dat", "content": "AP8=", "encoding": "base64", "mode": "0600"})
	if got := s.must("fs_read", map[string]any{"name": "agent-1", "path": "bin.dat"}); got["content"] != "AP8=" || got["encoding"] != "base64" {
		t.Errorf("fs_read of a binary file: %v", got)
	}
	if got := s.must("fs_stat", map[string]any{"name": "agent-1", "path": "bin.dat"}); got["size"] != float64(2) || got["mode"] != "0600" {
		t.Errorf("fs_stat: %v", got)
	}
	s.must("fs_mkdir", map[string]any{"name": "agent-1", "path": "out/a/b", "parents": true})
	entries := s.must("fs_list", map[string]any{"name": "agent-1", "path": "/sandbox"})["entries"].([]any)
	if len(entries) != 3 {
		t.Errorf("fs_list /sandbox: %v; want notes, bin.dat and out", entries)
	}
	s.must("fs_remove", map[string]any{"name": "agent-1", "path": "out", "recursive": true})
	if _, toolErr := s.call("fs_stat", map[string]any{"name": "agent-1", "path": "out"}); toolErr == "" {
		t.Error("fs_stat of a removed directory: found")
	}
	if got := s.must("sandbox_list", map[string]any{}); len(got["sandboxes"].([]any)) != 1 {
		t.Errorf("sandbox_list: %v", got)
	}
	if got := s.must("sandbox_stop", map[string]any{"name": "agent-1"}); got["phase"] != "stopped" {
		t.Errorf("sandbox_stop: %v", got)
	}
	if got := s.must("sandbox_start", map[string]any{"name": "agent-1"}); got["phase"] != "ready" {
		t.Errorf("sandbox_start: %v", got)
	}
	if _, toolErr := s.call("sandbox_pause", map[string]any{"name": "agent-1", "memory": true}); !strings.Contains(toolErr, "paused with --memory") && !strings.Contains(toolErr, "cannot pause with memory") {
		t.Errorf("sandbox_pause with memory of a sandbox that cannot be checkpointed: %q; want the reason", toolErr)
	}
	if got := s.must("sandbox_pause", map[string]any{"name": "agent-1"}); got["phase"] != "paused" {
		t.Errorf("sandbox_pause: %v", got)
	}
	if _, toolErr := s.call("sandbox_exec", map[string]any{"name": "agent-1", "command": []string{"true"}}); !strings.Contains(toolErr, "is paused") {
		t.Errorf("sandbox_exec on a paused sandbox: %q", toolErr)
	}
	if got := s.must("sandbox_resume", map[string]any{"name": "agent-1"}); got["phase"] != "ready" {
		t.Errorf("sandbox_resume: %v", got)
	}
	// a snapshot to come back to, and forks to try paths from
	if got := s.must("sandbox_snapshot", map[string]any{"name": "agent-1", "snapshot": "plan"}); got["name"] != "plan" || got["files"] == float64(0) {
		t.Errorf("sandbox_snapshot: %v", got)
	}
	if _, toolErr := s.call("sandbox_fork", map[string]any{"name": "agent-1", "count": 2}); !strings.Contains(toolErr, "2 more would pass it") {
		t.Errorf("a fork past the session's bound: %q", toolErr)
	}
	forks := s.must("sandbox_fork", map[string]any{"name": "agent-1", "count": 1, "name_prefix": "try"})
	if list, _ := forks["sandboxes"].([]any); len(list) != 1 {
		t.Fatalf("sandbox_fork: %v", forks)
	}
	for _, name := range []string{"try-1", "back"} {
		if name == "back" {
			s.must("sandbox_create", map[string]any{"name": "back", "from_snapshot": "plan"})
		}
		if got := s.must("sandbox_exec", map[string]any{"name": name, "command": []string{"cat", "/sandbox/notes/plan.txt"}}); got["stdout"] != "step 1\n" {
			t.Errorf("%s made from the snapshot reads %v", name, got)
		}
		s.must("sandbox_delete", map[string]any{"name": name})
	}
	if got := s.must("snapshot_list", map[string]any{}); !strings.Contains(fmt.Sprint(got), "plan") {
		t.Errorf("snapshot_list: %v", got)
	}
	s.must("snapshot_delete", map[string]any{"snapshot": "plan"})
	s.must("sandbox_delete", map[string]any{"name": "agent-1"})
	if _, toolErr := s.call("sandbox_get", map[string]any{"name": "agent-1"}); toolErr != `sandbox "agent-1" not found` {
		t.Errorf("sandbox_get after sandbox_delete: %q", toolErr)
	}
}

// The session's bound, bad input (a missing sandbox, a path with "..", a
// 1 MB command, arguments against the schema), 100 calls at once, and
// the session's sandboxes gone when it ends.
func TestMCPBoundsAndCleanup(t *testing.T) {
	s, home, ctx := stdioSession(t)
	cs := s.cs
	s.must("sandbox_create", map[string]any{"name": "one"})
	s.must("sandbox_create", map[string]any{"name": "two"})
	if _, toolErr := s.call("sandbox_create", map[string]any{"name": "three"}); !strings.Contains(toolErr, "--max-sandboxes 2") {
		t.Errorf("a third sandbox: %q; want the session's bound named", toolErr)
	}
	if _, toolErr := s.call("sandbox_exec", map[string]any{"name": "nope", "command": []string{"true"}}); toolErr != `sandbox "nope" not found` {
		t.Errorf("exec in a missing sandbox: %q; want the gateway's reason", toolErr)
	}
	if _, toolErr := s.call("fs_read", map[string]any{"name": "one", "path": "../../etc/shadow"}); !strings.Contains(toolErr, `".." is not taken`) {
		t.Errorf("fs_read of a path with ..: %q; want it refused, saying why", toolErr)
	}
	if _, toolErr := s.call("sandbox_exec", map[string]any{"name": "one", "command": []string{strings.Repeat("x", 1<<20)}}); !strings.Contains(toolErr, "more than") {
		t.Errorf("a 1 MB command: %q; want the bound named", toolErr)
	}
	if res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "sandbox_exec", Arguments: map[string]any{"name": 7}}); err == nil && !res.IsError {
		t.Error("a call against the schema (a number for a name) was run")
	}
	// 100 tool calls at once: each answered, the server still up
	var wg sync.WaitGroup
	failed := make(chan string, 100)
	for i := range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "sandbox_exec",
				Arguments: map[string]any{"name": "one", "command": []string{"echo", strconv.Itoa(i)}}})
			switch {
			case err != nil:
				failed <- err.Error()
			case res.IsError:
				failed <- fmt.Sprint(res.Content)
			case res.StructuredContent.(map[string]any)["stdout"] != strconv.Itoa(i)+"\n":
				failed <- fmt.Sprint(res.StructuredContent)
			}
		}()
	}
	wg.Wait()
	close(failed)
	for f := range failed {
		t.Errorf("one of 100 parallel execs: %s", f)
	}
	all, err := api(t, home).ListSandboxes(ctx, &corralv1.ListSandboxesRequest{})
	if err != nil || len(all.Sandboxes) != 2 || all.Sandboxes[0].Spec.Labels[mcptools.SessionLabel] == "" {
		t.Fatalf("before the end: %v, %v; want the session's two, labelled", all, err)
	}
	if err := cs.Close(); err != nil {
		t.Logf("close: %v", err)
	}
	testenv.Eventually(t, time.Minute, func() error {
		all, err := api(t, home).ListSandboxes(ctx, &corralv1.ListSandboxesRequest{})
		if err != nil {
			return err
		}
		if len(all.Sandboxes) != 0 {
			return errors.New("the session's sandboxes are still there after it ended")
		}
		return nil
	})
}

// The gateway serves the same tools at /mcp on its TLS listener: a client
// with a certificate of the gateway's CA drives a sandbox through them,
// journaled as that certificate's caller; a client without one is refused
// at the handshake, before any tool runs; gRPC on the same address still
// answers.
func TestMCPOverHTTPS(t *testing.T) {
	testenv.RequireRoot(t)
	home, certs := t.TempDir(), t.TempDir()
	addr := freePort(t)
	startGateway(t, home, "--driver", "native", "--listen", addr)
	mustCorral(t, home, "gateway", "client-cert", "agent-host", "--out", certs)
	cfg, err := tlsauth.ClientConfig(filepath.Join(certs, "ca.crt"), filepath.Join(certs, "agent-host.crt"), filepath.Join(certs, "agent-host.key"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	connect := func(tlsCfg *tls.Config) (*mcp.ClientSession, error) {
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg}, Timeout: 2 * time.Minute}
		c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
		return c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: "https://" + addr + "/mcp", HTTPClient: hc}, nil)
	}
	cs, err := connect(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	s := mcpSession{t, cs}
	s.must("sandbox_create", map[string]any{"name": "remote-agent"})
	if out := s.must("sandbox_exec", map[string]any{"name": "remote-agent", "command": []string{"echo", "over", "https"}}); out["stdout"] != "over https\n" {
		t.Errorf("sandbox_exec over HTTPS: %v", out)
	}
	s.must("fs_write", map[string]any{"name": "remote-agent", "path": "f.txt", "content": "remote\n"})
	if out := s.must("fs_read", map[string]any{"name": "remote-agent", "path": "f.txt"}); out["content"] != "remote\n" {
		t.Errorf("fs_read over HTTPS: %v", out)
	}
	sb, err := api(t, home).GetSandbox(ctx, &corralv1.GetSandboxRequest{Name: "remote-agent"})
	if err != nil || sb.Spec.Labels[mcptools.SessionLabel] != "https client certificate agent-host" {
		t.Errorf("the sandbox's session label: %v, %v; want the certificate's caller", sb.GetSpec().GetLabels(), err)
	}
	s.must("sandbox_delete", map[string]any{"name": "remote-agent"})

	// a web page's request, sent with its visitor's certificate: refused
	req, _ := http.NewRequest(http.MethodPost, "https://"+addr+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Origin", "https://evil.example")
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	resp, err := (&http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("a cross-site POST to /mcp: %s; want 403 Forbidden", resp.Status)
	}

	// no certificate (and no token): refused before anything is served
	bare := &tls.Config{RootCAs: cfg.RootCAs, ServerName: cfg.ServerName, MinVersion: tls.VersionTLS13}
	if _, err := connect(bare); err == nil {
		t.Error("an MCP client without a client certificate connected")
	}
	// gRPC on the same address, over HTTP/2
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := corralv1.NewSandboxServiceClient(conn).ListSandboxes(ctx, &corralv1.ListSandboxesRequest{}); err != nil {
		t.Errorf("gRPC beside MCP on the TLS listener: %v", err)
	}
}

// The official TypeScript MCP client (test/mcp-client, npm's
// @modelcontextprotocol/sdk from its lockfile) drives an agent's session
// over stdio and over HTTPS with a client certificate, and is refused
// without one.
func TestMCPWithTheOfficialTypeScriptClient(t *testing.T) {
	testenv.RequireRoot(t)
	dir := filepath.Join(testenv.ModuleRoot(), "test", "mcp-client")
	if _, err := exec.LookPath("node"); err != nil {
		requireNode(t, "needs Node.js: "+err.Error())
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@modelcontextprotocol", "sdk")); err != nil {
		requireNode(t, "needs the client's packages: run npm ci in test/mcp-client")
	}
	home, certs := t.TempDir(), t.TempDir()
	addr := freePort(t)
	startGateway(t, home, "--driver", "native", "--listen", addr)
	mustCorral(t, home, "gateway", "client-cert", "ts-agent", "--out", certs)
	cmd := exec.Command("node", "--test", "mcp.test.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CORRAL_BIN="+bin, "CORRAL_HOME="+home, "CORRAL_MCP_URL=https://"+addr+"/mcp",
		"CORRAL_CA="+filepath.Join(certs, "ca.crt"), "CORRAL_CERT="+filepath.Join(certs, "ts-agent.crt"), "CORRAL_KEY="+filepath.Join(certs, "ts-agent.key"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node --test: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "# pass 3") {
		t.Fatalf("node --test passed, but not its 3 tests:\n%s", out)
	}
}

// requireNode skips a test that needs Node.js and the MCP client's
// packages, or fails it under CORRAL_REQUIRE_NODE=1 (CI).
func requireNode(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("CORRAL_REQUIRE_NODE") == "1" {
		t.Fatalf("CORRAL_REQUIRE_NODE=1 but the test %s", why)
	}
	t.Skipf("%s (set CORRAL_REQUIRE_NODE=1 to make this a failure)", why)
}
