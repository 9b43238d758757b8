package netns

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/internal/testenv"
)

// A socket opened in another namespace is reached from inside it, not from
// the test's own namespace, and the test's threads stay where they were.
func TestListenInsideAnotherNamespace(t *testing.T) {
	testenv.RequireRoot(t)
	sh := exec.Command("unshare", "--net", "/bin/busybox", "sh", "-c", "ip link set lo up && echo up && exec sleep 60")
	out, err := sh.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sh.Process.Kill(); _ = sh.Wait() })
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "up\n" {
		t.Fatalf("the namespace's shell: %q, %v", line, err)
	}
	path := "/proc/" + strconv.Itoa(sh.Process.Pid) + "/ns/net"
	l, err := Listen(path, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port

	if c, err := net.DialTimeout("tcp", l.Addr().String(), time.Second); err == nil {
		c.Close()
		t.Fatalf("the listener in %s answers on the test's own loopback", path)
	}
	accepted := make(chan error, 1)
	go func() {
		c, err := l.Accept()
		if err == nil {
			_, err = c.Write([]byte("hello from the gateway\n"))
			c.Close()
		}
		accepted <- err
	}()
	got, err := exec.Command("nsenter", "--net="+path, "/bin/busybox", "nc", "127.0.0.1", strconv.Itoa(port)).Output()
	if err != nil || string(got) != "hello from the gateway\n" {
		t.Fatalf("from inside the namespace: %q, %v", got, err)
	}
	if err := <-accepted; err != nil {
		t.Fatal(err)
	}
	// Many listens later, no thread was left in the other namespace.
	for range 20 {
		l, err := Listen(path, "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		l.Close()
	}
	own, err := exec.Command("readlink", "/proc/self/ns/net").Output()
	if err != nil {
		t.Fatal(err)
	}
	other, err := exec.Command("readlink", path).Output()
	if err != nil || strings.TrimSpace(string(own)) == strings.TrimSpace(string(other)) {
		t.Fatalf("namespaces: own %q, other %q, %v", own, other, err)
	}
	if _, err := Listen("/proc/self/ns/nonesuch", "127.0.0.1:0"); err == nil {
		t.Fatal("a listen in a missing namespace succeeded")
	}
}

// Dial reaches a server on another namespace's loopback, and a closed port
// there is refused, not reached through the test's own loopback.
func TestDialInsideAnotherNamespace(t *testing.T) {
	testenv.RequireRoot(t)
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "index.html"), []byte("inside "+root), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := exec.Command("unshare", "--net", "/bin/busybox", "sh", "-c",
		"ip link set lo up && exec /bin/busybox httpd -f -p 127.0.0.1:8081 -h "+root)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Process.Kill(); _ = srv.Wait() })
	path := "/proc/" + strconv.Itoa(srv.Process.Pid) + "/ns/net"
	get := func() (string, error) {
		c, err := Dial(context.Background(), path, "tcp", "127.0.0.1:8081")
		if err != nil {
			return "", err
		}
		defer c.Close()
		if _, err := io.WriteString(c, "GET / HTTP/1.0\r\n\r\n"); err != nil {
			return "", err
		}
		b, err := io.ReadAll(c)
		return string(b), err
	}
	var got string
	if err := testenv.Until(10*time.Second, func() (err error) { got, err = get(); return err }); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(got, "inside "+root) {
		t.Fatalf("from inside the namespace: %q", got)
	}
	for range 20 { // no thread is left behind in the other namespace
		if _, err := get(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Dial(context.Background(), path, "tcp", "127.0.0.1:8082"); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("a closed port inside: %v, want connection refused", err)
	}
	own, err := os.Readlink("/proc/thread-self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	if other, err := os.Readlink(path); err != nil || own == other {
		t.Fatalf("namespaces: own %q, other %q, %v", own, other, err)
	}
	if _, err := Dial(context.Background(), "/proc/self/ns/nonesuch", "tcp", "127.0.0.1:8081"); err == nil {
		t.Fatal("a dial in a missing namespace succeeded")
	}
}
