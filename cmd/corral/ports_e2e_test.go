package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/internal/testenv"
)

// webCommand is the main process of the ports tests' sandboxes, the same
// on the host root (native) and in the test image (Docker): an HTTP server
// on 8080 whose page names the sandbox, and an echo server on 9000 that
// ends each connection once the client has half-closed it.
var webCommand = []string{"/bin/sh", "-c", "echo hello from $(hostname) > /sandbox/index.html; " +
	"/bin/busybox nc -ll -p 9000 -e /bin/cat & exec /bin/busybox httpd -f -p 8080 -h /sandbox"}

// onEachGateway runs test on a native and on a Docker gateway, each
// skipped where its driver cannot run; gateway starts a gateway of that
// driver on a home, again after a restart.
func onEachGateway(t *testing.T, test func(t *testing.T, gateway func(home string, args ...string) *gatewayProc)) {
	t.Run("native", func(t *testing.T) {
		test(t, func(home string, args ...string) *gatewayProc { return nativeGateway(t, home, args...) })
	})
	t.Run("docker", func(t *testing.T) {
		testenv.RequireDocker(t)
		label := newLabel(t)
		test(t, func(home string, args ...string) *gatewayProc { return dockerGateway(t, home, label, args...) })
	})
}

// createWeb creates a sandbox running webCommand, with flags (a policy,
// say) before the command.
func createWeb(t *testing.T, run func(args ...string) string, name string, flags ...string) {
	t.Helper()
	args := append([]string{"sandbox", "create", "--name", name}, flags...)
	run(append(append(args, "--"), webCommand...)...)
}

// forwarding is a running `corral sandbox port-forward`.
type forwarding struct {
	cmd    *exec.Cmd
	addrs  []string // the local addresses, in the order of the arguments
	stderr *testenv.SyncBuffer
}

// portForward starts `corral ARGS...` (a port-forward) and waits for its
// "Forwarding from" lines. At the test's end it is interrupted as Ctrl-C
// would, and must exit 0.
func portForward(t *testing.T, env []string, ports int, args ...string) *forwarding {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(cmd.Environ(), env...)
	return startForwarding(t, cmd, ports)
}

// startForwarding starts cmd, a port-forward of as many ports, as
// portForward does.
func startForwarding(t *testing.T, cmd *exec.Cmd, ports int) *forwarding {
	t.Helper()
	f := &forwarding{cmd: cmd, stderr: &testenv.SyncBuffer{}}
	f.cmd.Stderr = f.stderr
	out, err := f.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := f.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	lines := bufio.NewScanner(out)
	for len(f.addrs) < ports && lines.Scan() {
		var addr string
		var remote int
		if _, err := fmt.Sscanf(lines.Text(), "Forwarding from %s -> %d", &addr, &remote); err != nil {
			t.Fatalf("port-forward printed %q: %v", lines.Text(), err)
		}
		f.addrs = append(f.addrs, addr)
	}
	go func() { // "Handling connection for ..." lines
		for lines.Scan() {
		}
		exited <- f.cmd.Wait()
	}()
	if len(f.addrs) < ports {
		_ = f.cmd.Process.Kill()
		t.Fatalf("port-forward printed %d addresses, want %d: %v\n%s", len(f.addrs), ports, <-exited, f.stderr.String())
	}
	t.Cleanup(func() {
		_ = f.cmd.Process.Signal(syscall.SIGINT)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("port-forward after Ctrl-C: %v\n%s", err, f.stderr.String())
			}
		case <-time.After(30 * time.Second):
			_ = f.cmd.Process.Kill()
			t.Errorf("port-forward still runs 30 s after Ctrl-C\n%s", f.stderr.String())
		}
	})
	return f
}

// get fetches the page of an HTTP server at addr on a connection of its
// own.
func get(addr string) (string, error) {
	c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get("http://" + addr + "/index.html")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("status %s", resp.Status)
	}
	return string(body), err
}

// waitServed waits until addr answers with want.
func waitServed(t *testing.T, addr, want string) {
	t.Helper()
	testenv.Eventually(t, 60*time.Second, func() error {
		body, err := get(addr)
		if err == nil && body != want {
			err = fmt.Errorf("answered %q, want %q", body, want)
		}
		return err
	})
}

// getConcurrently makes n requests to addr at once, each on a connection
// of its own, and fails unless every one is answered with want.
func getConcurrently(t *testing.T, addr string, n int, want string) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			body, err := get(addr)
			if err == nil && body != want {
				err = fmt.Errorf("answered %q", body)
			}
			if err != nil {
				errs <- fmt.Errorf("request %d: %w", i, err)
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	var failed []string
	for err := range errs {
		failed = append(failed, err.Error())
	}
	if len(failed) > 0 {
		t.Fatalf("%d of %d concurrent requests to %s failed:\n%s", len(failed), n, addr, strings.Join(failed, "\n"))
	}
}

// echoHalfClosed sends a message to the echo server at addr and
// half-closes: the echo comes back whole, then EOF once the server
// closed. Without the half-close reaching the sandbox, the server would
// never end, and the read would time out.
func echoHalfClosed(t *testing.T, addr string) {
	t.Helper()
	testenv.Eventually(t, 60*time.Second, func() error {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(20 * time.Second))
		msg := strings.Repeat("through the tunnel and back; ", 10000) // several frames
		if _, err := io.WriteString(c, msg); err != nil {
			return err
		}
		if err := c.(*net.TCPConn).CloseWrite(); err != nil {
			return err
		}
		got, err := io.ReadAll(c)
		if err != nil {
			return fmt.Errorf("after %d bytes: %w", len(got), err)
		}
		if string(got) != msg {
			return fmt.Errorf("echoed %d bytes, want %d", len(got), len(msg))
		}
		return nil
	})
}

// serverCloses sends an HTTP/1.0 request to addr without half-closing:
// the server answers and closes, and the client reads the answer to EOF.
func serverCloses(t *testing.T, addr, want string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(c, "GET /index.html HTTP/1.0\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(c)
	if err != nil || !strings.HasSuffix(string(got), "\r\n\r\n"+want) {
		t.Fatalf("after the server's close: %q, %v; want the answer, then EOF", got, err)
	}
}

// refused says whether a connection to addr fails to get an answer.
func refused(addr string) bool {
	_, err := get(addr)
	return err != nil
}

// 50 concurrent requests through port-forward,
// half-closes both ways, and a port where nothing listens reported.
func TestPortForward(t *testing.T) {
	onEachGateway(t, func(t *testing.T, gateway func(string, ...string) *gatewayProc) {
		home := t.TempDir()
		gateway(home)
		run := func(args ...string) string { return mustCorral(t, home, args...) }
		// egress to one host only: reaching in is not egress, and the
		// rules do not apply to it (TestExpose's sandbox has no egress)
		createWeb(t, run, "web", "--policy", egressPolicy(t, "a.test", "80", ""))
		if out := run("sandbox", "get", "web"); !strings.Contains(out, "network: test: a.test:80") {
			t.Fatalf("the egress rules are not in force:\n%s", out)
		}
		f := portForward(t, nil, 3, "--home", home, "sandbox", "port-forward", "web", "8080", "0:9000", "9999")
		waitServed(t, f.addrs[0], "hello from web\n")
		getConcurrently(t, f.addrs[0], 50, "hello from web\n")
		serverCloses(t, f.addrs[0], "hello from web\n")
		echoHalfClosed(t, f.addrs[1])

		// nothing listens on 9999 inside: the local connection ends at
		// once, and port-forward says why and goes on
		if body, err := get(f.addrs[2]); err == nil {
			t.Fatalf("port 9999, where nothing listens, answered %q", body)
		}
		testenv.Eventually(t, 10*time.Second, func() error {
			if !strings.Contains(f.stderr.String(), `nothing listens on 127.0.0.1:9999 in sandbox "web"`) {
				return fmt.Errorf("port-forward's errors: %q", f.stderr.String())
			}
			return nil
		})
		getConcurrently(t, f.addrs[0], 5, "hello from web\n")

		// a sandbox that does not run is refused before anything listens
		run("sandbox", "stop", "web")
		if _, errOut, code := corral(t, home, "sandbox", "port-forward", "web", "8080"); code == 0 || !strings.Contains(errOut, "not ready") {
			t.Fatalf("port-forward to a stopped sandbox: exit %d %q", code, errOut)
		}
	})
}

// Port-forward through a context that
// reaches the gateway over mutual TLS.
func TestPortForwardOverMutualTLS(t *testing.T) {
	onEachGateway(t, func(t *testing.T, gateway func(string, ...string) *gatewayProc) {
		home, certs := t.TempDir(), t.TempDir()
		addr := freePort(t)
		gateway(home, "--listen", addr)
		mustCorral(t, home, "gateway", "client-cert", "alice", "--out", certs)
		env := []string{"CORRAL_CONFIG=" + filepath.Join(t.TempDir(), "config"), "CORRAL_HOME="}
		run := func(args ...string) string { t.Helper(); return mustCorralEnv(t, env, args...) }
		run("context", "add", "remote", "--gateway", "https://"+addr, "--ca", filepath.Join(certs, "ca.crt"),
			"--cert", filepath.Join(certs, "alice.crt"), "--key", filepath.Join(certs, "alice.key"))
		run("context", "use", "remote")
		createWeb(t, run, "far")
		f := portForward(t, env, 2, "sandbox", "port-forward", "far", "8080", "9000")
		waitServed(t, f.addrs[0], "hello from far\n")
		getConcurrently(t, f.addrs[0], 50, "hello from far\n")
		echoHalfClosed(t, f.addrs[1])
	})
}

// Expose serves while the sandbox runs, refuses
// while it does not, serves the same address after a gateway restart, and
// ends with unexpose or the sandbox's delete.
func TestExpose(t *testing.T) {
	onEachGateway(t, func(t *testing.T, gateway func(string, ...string) *gatewayProc) {
		home := t.TempDir()
		g := gateway(home)
		run := func(args ...string) string { return mustCorral(t, home, args...) }
		createWeb(t, run, "web")
		addr := strings.TrimSpace(run("sandbox", "expose", "web", "8080"))
		if host, _, err := net.SplitHostPort(addr); err != nil || host != "127.0.0.1" {
			t.Fatalf("expose printed %q", addr)
		}
		waitServed(t, addr, "hello from web\n")
		getConcurrently(t, addr, 50, "hello from web\n")
		serverCloses(t, addr, "hello from web\n")
		if again := strings.TrimSpace(run("sandbox", "expose", "web", "8080")); again != addr {
			t.Fatalf("exposed again at %q, want the recorded %q", again, addr)
		}
		if _, errOut, code := corral(t, home, "sandbox", "expose", "web", "8080", "--address", freePort(t)); code == 0 || !strings.Contains(errOut, "already exposed at "+addr) {
			t.Fatalf("the same port at another address: exit %d %q", code, errOut)
		}
		echoAddr := strings.TrimSpace(run("sandbox", "expose", "web", "9000", "--address", freePort(t)))
		echoHalfClosed(t, echoAddr)
		if list := run("sandbox", "ports", "web"); !strings.Contains(list, addr) || !strings.Contains(list, echoAddr) {
			t.Fatalf("sandbox ports:\n%s", list)
		}

		run("sandbox", "stop", "web")
		if !refused(addr) {
			t.Fatal("a stopped sandbox's exposed port answered")
		}
		run("sandbox", "start", "web") // a new incarnation, a new network namespace
		waitServed(t, addr, "hello from web\n")

		g.signal(syscall.SIGTERM)
		if code := g.exitCode(60 * time.Second); code != 0 {
			t.Fatalf("gateway exit %d", code)
		}
		if !refused(addr) {
			t.Fatal("the exposed port answered with the gateway down")
		}
		gateway(home)
		waitServed(t, addr, "hello from web\n")
		getConcurrently(t, addr, 50, "hello from web\n")

		run("sandbox", "unexpose", "web", "9000")
		if _, err := net.Dial("tcp", echoAddr); err == nil {
			t.Fatal("an unexposed address still accepts connections")
		}
		run("sandbox", "delete", "web")
		if _, err := net.Dial("tcp", addr); err == nil {
			t.Fatal("a deleted sandbox's address still accepts connections")
		}
		if list := run("sandbox", "ports"); strings.Contains(list, addr) {
			t.Fatalf("sandbox ports after delete:\n%s", list)
		}
	})
}
