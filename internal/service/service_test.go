package service

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
	"github.com/corral-sandbox/corral/internal/caller"
	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

// stub is a Lifecycle that answers the calls a test sets and panics on
// any other (the embedded nil interface).
type stub struct {
	Lifecycle
	get    func(name string) (*sandbox.Sandbox, error)
	gone   []string
	delete []string
}

func (s *stub) Get(_ context.Context, name string) (*sandbox.Sandbox, error) { return s.get(name) }
func (s *stub) Protections(context.Context, *sandbox.Sandbox) string         { return "landlock" }
func (s *stub) Network(context.Context, *sandbox.Sandbox) string             { return "deny all" }
func (s *stub) Denials(context.Context, string, bool) ([]sandbox.EgressDecision, <-chan sandbox.EgressDecision, func(), error) {
	return nil, nil, nil, errdefs.NotImplemented("no egress in this stub")
}
func (s *stub) AssumeGone(ctx context.Context, name string, force bool, why string) (*sandbox.Sandbox, error) {
	s.gone = append(s.gone, fmt.Sprintf("%s|%v|%s|%s", name, force, caller.From(ctx).Name, why))
	return &sandbox.Sandbox{ID: "sb-1", Name: name}, nil
}
func (s *stub) Delete(_ context.Context, name string, _ bool) (*sandbox.Sandbox, error) {
	s.delete = append(s.delete, name)
	return &sandbox.Sandbox{ID: "sb-1", Name: name}, nil
}

// dial serves l on a Unix socket, as the gateway's home socket, and
// connects to it.
func dial(t *testing.T, c Core) *grpc.ClientConn {
	t.Helper()
	path := filepath.Join(t.TempDir(), "api.sock")
	lis, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(c)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func TestServiceOnALifecycle(t *testing.T) {
	l := &stub{get: func(name string) (*sandbox.Sandbox, error) {
		if name == "a" {
			return &sandbox.Sandbox{ID: "sb-1", Name: "a", Phase: sandbox.PhaseReady}, nil
		}
		return nil, errdefs.NotFound("sandbox %q not found", name)
	}}
	conn := dial(t, Core{Sandboxes: l})
	api := corralv1.NewSandboxServiceClient(conn)
	ctx := context.Background()

	sb, err := api.GetSandbox(ctx, &corralv1.GetSandboxRequest{Name: "a"})
	if err != nil || sb.GetId() != "sb-1" || sb.GetPhase() != string(sandbox.PhaseReady) || sb.GetProtections() != "landlock" {
		t.Fatalf("get a = %v, %v", sb, err)
	}
	_, err = api.GetSandbox(ctx, &corralv1.GetSandboxRequest{Name: "b"})
	if status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), `sandbox "b" not found`) {
		t.Fatalf("get b = %v, want NotFound with the lifecycle's message", err)
	}

	// --assume-gone reaches the lifecycle as asked (it decides; it refuses one without --force)
	if _, err := api.DeleteSandbox(ctx, &corralv1.DeleteSandboxRequest{Name: "a", AssumeGone: true, Force: true, Reason: "host lost"}); err != nil {
		t.Fatal(err)
	}
	if want := "a|true|a local socket user|host lost"; len(l.gone) != 1 || l.gone[0] != want {
		t.Fatalf("assume-gone reached the lifecycle as %v, want [%s]", l.gone, want)
	}
	if _, err := api.DeleteSandbox(ctx, &corralv1.DeleteSandboxRequest{Name: "a"}); err != nil || len(l.delete) != 1 {
		t.Fatalf("delete = %v, lifecycle deletes %v", err, l.delete)
	}

	for _, svc := range []string{"", corralv1.SandboxService_ServiceDesc.ServiceName} {
		h, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health %q = %v, %v", svc, h, err)
		}
	}
}

// The API edge knows the lifecycle's interface and nothing that serves it:
// no concrete driver, no store implementation (only the wiring, in
// internal/gateway, imports those).
func TestServiceImportsNoDriverOrStore(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const mod = "github.com/corral-sandbox/corral/internal/"
	for _, pkg := range strings.Fields(string(out)) {
		rest, ok := strings.CutPrefix(pkg, mod)
		if !ok {
			continue
		}
		if strings.HasPrefix(rest, "driver/") || strings.HasPrefix(rest, "store/") || rest == "gateway" {
			t.Errorf("internal/service depends on %s", pkg)
		}
	}
}
