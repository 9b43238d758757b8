package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"

	"github.com/corral-sandbox/corral/internal/tlsauth"
)

func freePort(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	return lis.Addr().String()
}

// The CLI flow over mutual TLS on
// 127.0.0.1 through a context; keys are private and never logged.
func TestCLIOverMutualTLS(t *testing.T) {
	home, certs := t.TempDir(), t.TempDir()
	addr := freePort(t)
	g := startGateway(t, home, "--listen", addr)
	mustCorral(t, home, "gateway", "client-cert", "alice", "--out", certs)
	for _, dir := range []string{filepath.Join(home, "tls"), certs} {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if fi, _ := e.Info(); fi.Mode().Perm() != 0o600 {
				t.Errorf("%s: mode %o, want 600", filepath.Join(dir, e.Name()), fi.Mode().Perm())
			}
		}
	}
	env := []string{"CORRAL_CONFIG=" + filepath.Join(t.TempDir(), "config"), "CORRAL_HOME="}
	remote := func(args ...string) (string, string, int) { return corralEnv(t, env, args...) }
	must := func(args ...string) string { t.Helper(); return mustCorralEnv(t, env, args...) }
	must("context", "add", "remote", "--gateway", "https://"+addr, "--ca", filepath.Join(certs, "ca.crt"),
		"--cert", filepath.Join(certs, "alice.crt"), "--key", filepath.Join(certs, "alice.key"))
	must("context", "use", "remote")
	if out := must("context", "list"); !strings.Contains(out, "*") || !strings.Contains(out, "remote") {
		t.Fatalf("context list:\n%s", out)
	}
	must("sandbox", "create", "--name", "far", "--", "sleep", "1d")
	if out := must("sandbox", "get", "far", "-o", "json"); !strings.Contains(out, `"phase": "ready"`) {
		t.Fatalf("get over mTLS: %s", out)
	}
	must("sandbox", "stop", "far")
	must("sandbox", "start", "far")
	if out := must("sandbox", "history", "far"); !strings.Contains(out, "driver.start") {
		t.Fatalf("history: %s", out)
	}
	must("sandbox", "list")
	// the file API is served on the same mTLS listener: the fake driver
	// answers it (it runs no supervisor, so no file operation)
	if _, errOut, code := remote("sandbox", "cp", "far:/sandbox/x", filepath.Join(t.TempDir(), "x")); code != 1 || !strings.Contains(errOut, "file operation stat on /sandbox/x exited 127") {
		t.Fatalf("cp over mTLS: %d %q", code, errOut)
	}
	must("sandbox", "delete", "far")
	if _, errOut, code := remote("sandbox", "get", "far"); code != 1 || !strings.Contains(errOut, `sandbox "far" not found`) {
		t.Fatalf("get after delete: %d %q", code, errOut)
	}

	// health checking works with standard clients
	cfg, err := tlsauth.ClientConfig(filepath.Join(certs, "ca.crt"), filepath.Join(certs, "alice.crt"), filepath.Join(certs, "alice.key"))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	hc, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: "corral.v1.SandboxService"})
	if err != nil || hc.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v %v", hc, err)
	}

	// and so does server reflection (grpcurl lists the API)
	refl, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := refl.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	resp, err := refl.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var services []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		services = append(services, s.Name)
	}
	if !slices.Contains(services, "corral.v1.SandboxService") || !slices.Contains(services, "corral.v1.FileService") || !slices.Contains(services, "grpc.health.v1.Health") {
		t.Fatalf("reflection lists %v", services)
	}

	// revocation: refused at the next handshake, with a clear message
	mustCorral(t, home, "gateway", "revoke", "alice")
	_, errOut, code := remote("sandbox", "list")
	if code != 1 || !strings.Contains(errOut, "refused this client certificate") {
		t.Fatalf("after revoke: exit %d %q", code, errOut)
	}
	// a gateway restart keeps the revocation
	g.signal(15)
	g.exitCode(30 * time.Second)
	startGateway(t, home, "--listen", addr)
	if _, errOut, code := remote("sandbox", "list"); code != 1 || !strings.Contains(errOut, "refused") {
		t.Fatalf("after restart: exit %d %q", code, errOut)
	}
	if strings.Contains(g.logs.String(), "PRIVATE KEY") {
		t.Fatal("the gateway logged a private key")
	}
	// no client certificate and no token: every call is refused
	noCert := filepath.Join(t.TempDir(), "config")
	os.WriteFile(noCert, []byte("current-context: bare\ncontexts:\n  bare:\n    gateway: https://"+addr+"\n    ca: "+filepath.Join(certs, "ca.crt")+"\n"), 0o600)
	if _, errOut, code := corralEnv(t, []string{"CORRAL_CONFIG=" + noCert, "CORRAL_HOME="}, "sandbox", "list"); code != 1 || !strings.Contains(errOut, "a client certificate or a bearer token is needed") {
		t.Fatalf("without a certificate: exit %d %q", code, errOut)
	}
}
