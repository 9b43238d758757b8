package client_test

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/corral-sandbox/corral/client"
	"github.com/corral-sandbox/corral/internal/testenv"
)

// bin is the corral binary the tests run gateways of.
var bin string

func TestMain(m *testing.M) { testenv.MainWithCorral(m, &bin) }

// gateway runs `corral gateway` on a new home with args and returns a
// client of it, closed (and the gateway stopped) when the test ends.
func gateway(t *testing.T, args ...string) *client.Client {
	t.Helper()
	home := t.TempDir()
	logs := &testenv.SyncBuffer{}
	cmd := exec.Command(bin, append([]string{"--home", home, "gateway"}, args...)...)
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("gateway log:\n%s", logs.String())
		}
	})
	c, err := client.New(client.Options{Home: home})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	err = testenv.Until(30*time.Second, func() error {
		select {
		case <-done:
			t.Fatalf("the gateway ended: %s", logs.String())
		default:
		}
		_, _, err := c.List(ctx(t), client.ListOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("the gateway did not answer: %v\n%s", err, logs.String())
	}
	return c
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return c
}

// A sandbox on a real driver, driven as a Go program would: create and
// wait, run commands, write and read files, copy trees both ways, reach a
// port inside, stop, start, delete.
func TestClientOnNative(t *testing.T) {
	testenv.RequireRoot(t)
	c := gateway(t, "--driver", "native") // on the host's root, read-only
	spec := &client.Spec{Command: []string{"/bin/busybox", "nc", "-ll", "-p", "7070", "-e", "/bin/cat"}}
	created, err := c.Create(ctx(t), "sdk", spec, client.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if created.Sandbox.Phase != "ready" || !created.New {
		t.Fatalf("Create: %+v; want a new sandbox, ready", created)
	}
	t.Cleanup(func() { c.Delete(context.Background(), "sdk", client.DeleteOptions{Force: true}) })

	out, err := c.Run(ctx(t), "sdk", "sh", "-c", "echo out; echo err >&2; exit 3")
	if err != nil || string(out.Stdout) != "out\n" || string(out.Stderr) != "err\n" || out.ExitCode != 3 {
		t.Errorf("Run: %+v, %v; want out, err and exit code 3", out, err)
	}
	var echoed bytes.Buffer
	code, err := c.Exec(ctx(t), "sdk", []string{"cat"}, client.ExecOptions{Stdin: strings.NewReader("through stdin\n"), Stdout: &echoed})
	if err != nil || code != 0 || echoed.String() != "through stdin\n" {
		t.Errorf("Exec cat with stdin: %d, %q, %v", code, echoed.String(), err)
	}

	if _, err := c.WriteFile(ctx(t), "sdk", "/sandbox/note", strings.NewReader("hello\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if data, err := c.ReadFile(ctx(t), "sdk", "/sandbox/note"); err != nil || string(data) != "hello\n" {
		t.Errorf("ReadFile: %q, %v", data, err)
	}
	if info, err := c.Stat(ctx(t), "sdk", "/sandbox/note"); err != nil || info.Size != 6 || info.Mode&0o777 != 0o600 {
		t.Errorf("Stat: %v, %v; want 6 bytes, mode 0600", info, err)
	}

	local := t.TempDir()
	tree := filepath.Join(local, "tree")
	os.MkdirAll(filepath.Join(tree, "sub"), 0o755)
	os.WriteFile(filepath.Join(tree, "sub", "leaf"), []byte("leaf\n"), 0o644)
	var lastCopied int64
	if err := c.CopyTo(ctx(t), tree, "sdk", "/sandbox", client.CopyOptions{Progress: func(n, _ int64) { lastCopied = n }}); err != nil {
		t.Fatal(err)
	}
	if lastCopied == 0 {
		t.Error("CopyTo reported no progress")
	}
	if out, err := c.Run(ctx(t), "sdk", "cat", "/sandbox/tree/sub/leaf"); err != nil || string(out.Stdout) != "leaf\n" {
		t.Errorf("the tree copied in: %+v, %v", out, err)
	}
	back := filepath.Join(local, "back")
	if err := c.CopyFrom(ctx(t), "sdk", "/sandbox/tree", back, client.CopyOptions{}); err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(filepath.Join(back, "sub", "leaf")); err != nil || string(data) != "leaf\n" {
		t.Errorf("the tree copied out: %q, %v", data, err)
	}
	entries, err := c.ListDir(ctx(t), "sdk", "/sandbox")
	if err != nil || len(entries) != 2 {
		t.Errorf("ListDir /sandbox: %v, %v; want note and tree", entries, err)
	}

	conn, err := c.DialPort(ctx(t), "sdk", 7070)
	if err != nil {
		t.Fatal(err)
	}
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	io.WriteString(conn, "ping\n")
	if line, err := bufio.NewReader(conn).ReadString('\n'); line != "ping\n" {
		t.Errorf("the echo inside answered %q, %v", line, err)
	}
	conn.Close()
	refused, err := c.DialPort(ctx(t), "sdk", 7071)
	if err != nil {
		t.Fatal(err)
	}
	refused.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.ReadAll(refused); status.Code(err) != codes.FailedPrecondition || !strings.Contains(client.Message(err), "nothing listens") {
		t.Errorf("reading from a port nothing listens on: %v; want the gateway's reason", err)
	}

	if sb, err := c.Stop(ctx(t), "sdk", false); err != nil || sb.Phase != "stopped" {
		t.Fatalf("Stop: %v, %v; want stopped", sb, err)
	}
	if data, err := c.ReadFile(ctx(t), "sdk", "/sandbox/note"); err != nil || string(data) != "hello\n" {
		t.Errorf("ReadFile of a stopped sandbox: %q, %v", data, err)
	}
	if sb, err := c.Start(ctx(t), "sdk", false); err != nil || sb.Phase != "ready" {
		t.Fatalf("Start: %v, %v; want ready", sb, err)
	}
	if _, err := c.Delete(ctx(t), "sdk", client.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx(t), "sdk"); status.Code(err) != codes.NotFound {
		t.Errorf("Get after Delete: %v; want not found", err)
	}
}

// The gateway's answers come as its one-line reasons with their codes; a
// wait that meets the error phase fails with the reason; a gateway that
// is not there is said in plain words.
func TestClientErrors(t *testing.T) {
	c := gateway(t, "--driver", "fake", "--provisioning-timeout", "1s")
	_, err := c.Get(ctx(t), "nope")
	if status.Code(err) != codes.NotFound || client.Message(err) != `sandbox "nope" not found` {
		t.Errorf("Get of an unknown sandbox: %v (%q); want NotFound with the gateway's reason", err, client.Message(err))
	}
	if _, err := c.Create(ctx(t), "Bad_Name", &client.Spec{}, client.CreateOptions{}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("Create with a bad name: %v; want invalid argument", err)
	}
	created, err := c.Create(ctx(t), "quick", &client.Spec{Command: []string{"sleep", "1d"}}, client.CreateOptions{})
	if err != nil || created.Sandbox.Phase != "ready" {
		t.Fatalf("Create on the fake driver: %v, %v", created, err)
	}
	if out, err := c.Run(ctx(t), "quick", "echo", "hi"); err != nil || string(out.Stdout) != "hi\n" {
		t.Errorf("Run echo on the fake driver: %+v, %v", out, err)
	}
	// A wait cut short says the request stands.
	short, cancel := context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel()
	<-short.Done()
	if _, err := c.Wait(short, created.Sandbox, client.Stopped, nil); err == nil || !strings.Contains(err.Error(), "gateway keeps working on it") {
		t.Errorf("a wait past its deadline: %v; want that the request stands", err)
	}

	nobody, err := client.New(client.Options{Home: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer nobody.Close()
	_, err = nobody.Get(ctx(t), "x")
	if status.Code(err) != codes.Unavailable || !strings.Contains(client.Message(err), "is `corral gateway` running?") {
		t.Errorf("a client of no gateway: %v; want Unavailable saying so", err)
	}
}

// Options reach the gateway as the command line does: an address first,
// then a named context, then a home, then the current context.
func TestOptionsTarget(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("CORRAL_CONFIG", filepath.Join(dir, "config"))
	t.Setenv("CORRAL_HOME", "")
	ca := filepath.Join(dir, "ca.crt")
	os.WriteFile(ca, []byte("x"), 0o600)
	cfg := &client.Config{CurrentContext: "remote", Contexts: map[string]*client.Context{
		"remote": {Gateway: "https://gw.example:7443", CA: ca, Cert: ca, Key: ca},
		"local":  {Gateway: "unix:///run/corral.sock"},
	}}
	if err := cfg.Save(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		opts client.Options
		want string
	}{
		{client.Options{}, "https://gw.example:7443"},
		{client.Options{Context: "local"}, "unix:///run/corral.sock"},
		{client.Options{Home: "/srv/corral"}, "unix:///srv/corral/corral.sock"},
		{client.Options{Gateway: "unix:///tmp/x.sock", Context: "remote"}, "unix:///tmp/x.sock"},
	} {
		got, err := c.opts.Target()
		if err != nil || got.Gateway != c.want {
			t.Errorf("Target of %+v: %q, %v; want %q", c.opts, got.Gateway, err, c.want)
		}
	}
	if _, err := (client.Options{Context: "gone"}).Target(); err == nil || !strings.Contains(err.Error(), `context "gone" not found`) {
		t.Errorf("Target of an unknown context: %v", err)
	}
	if _, err := client.New(client.Options{Gateway: "https://gw.example"}); err == nil || !strings.Contains(err.Error(), "HOST:PORT") {
		t.Errorf("New of an https address without a port: %v", err)
	}
	if err := (&client.Context{Gateway: "https://gw.example:7443"}).Check(); err == nil || !strings.Contains(err.Error(), "CA certificate") {
		t.Errorf("Check of an https context without its CA: %v", err)
	}
	caFile := filepath.Join(dir, "ca.crt")
	os.WriteFile(caFile, []byte("x"), 0o600)
	if err := (&client.Context{Gateway: "https://gw.example:7443", CA: caFile}).Check(); err == nil ||
		!strings.Contains(err.Error(), "client certificate") || !strings.Contains(err.Error(), "bearer token") {
		t.Errorf("Check of an https context with neither a certificate nor a token: %v", err)
	}
	if err := (&client.Context{Gateway: "https://gw.example:7443", CA: caFile, Token: "corral_tk_x"}).Check(); err != nil {
		t.Errorf("Check of an https context with a token: %v", err)
	}
	t.Setenv(client.TokenEnv, "corral_tk_env")
	t.Setenv(client.TenantEnv, "acme")
	if got, _ := (client.Options{Gateway: "unix:///tmp/x.sock"}).Target(); got.Token != "corral_tk_env" || got.Tenant != "acme" {
		t.Errorf("Target with CORRAL_TOKEN and CORRAL_TENANT set: %+v", got)
	}
	if got, _ := (client.Options{Gateway: "unix:///tmp/x.sock", Token: "corral_tk_opt"}).Target(); got.Token != "corral_tk_opt" {
		t.Errorf("Target with a token in the options and another in CORRAL_TOKEN: %+v", got)
	}
	os.WriteFile(filepath.Join(dir, "config"), []byte("contexts: {a: {gatway: x}}\n"), 0o600)
	if _, err := client.LoadConfig(); err == nil || !strings.Contains(err.Error(), "gatway") {
		t.Errorf("LoadConfig of a file with an unknown key: %v; want the key named", err)
	}
}
