package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
	"github.com/corral-sandbox/corral/internal/access"
	"github.com/corral-sandbox/corral/internal/caller"
	"github.com/corral-sandbox/corral/internal/tlsauth"
)

// bearerCreds put a token, and a tenant to act in, on every call.
type bearerCreds struct{ token, tenant string }

func (b bearerCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	md := map[string]string{}
	if b.token != "" {
		md["authorization"] = "Bearer " + b.token
	}
	if b.tenant != "" {
		md["corral-tenant"] = b.tenant
	}
	return md, nil
}
func (bearerCreds) RequireTransportSecurity() bool { return true }

// tlsConn is a connection to the gateway at addr over TLS, with a client
// certificate (certDir/NAME.crt) when name is set, and creds' token.
func tlsConn(t *testing.T, addr, certDir, name string, creds *bearerCreds) *grpc.ClientConn {
	t.Helper()
	cert, key := "", ""
	if name != "" {
		cert, key = filepath.Join(certDir, name+".crt"), filepath.Join(certDir, name+".key")
	}
	cfg, err := tlsauth.ClientConfig(filepath.Join(certDir, "ca.crt"), cert, key)
	if err != nil {
		t.Fatal(err)
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(cfg))}
	if creds != nil {
		opts = append(opts, grpc.WithPerRPCCredentials(*creds))
	}
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// lastLine is the token `corral token create` prints, alone on its last
// line.
func lastLine(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return lines[len(lines)-1]
}

// target is what one run of an RPC names: a sandbox, a pool, a secret, a
// tenant, a token and a snapshot.
type target struct{ sandbox, pool, secret, tenant, token, snapshot string }

// rpcCase is how the table calls one RPC: its first request for a target;
// whether it names something a tenant owns (another tenant's is then not
// found, or, where hides says so, answered as if it did not exist); and,
// for a list, the foreign items its reply shows.
type rpcCase struct {
	req       func(tg target, n int) proto.Message
	addresses bool
	hides     func(reply proto.Message) bool
	foreign   func(reply proto.Message, own string, tenantOf func(id string) string) []string
}

func sandboxesOf(own string, list []*corralv1.Sandbox) (out []string) {
	for _, sb := range list {
		if sb.Tenant != own {
			out = append(out, sb.Tenant+"/"+sb.Name)
		}
	}
	return out
}

// rpcs has a case for every RPC of the API; TestEveryRPCByEveryRole fails
// for one the descriptors have and this table lacks.
var rpcs = map[string]rpcCase{
	"CreateSandbox": {req: func(tg target, n int) proto.Message {
		return &corralv1.CreateSandboxRequest{Name: fmt.Sprintf("new-%d", n), Spec: &corralv1.SandboxSpec{Command: []string{"sleep", "1d"}}}
	}},
	"GetSandbox": {addresses: true, req: func(tg target, _ int) proto.Message { return &corralv1.GetSandboxRequest{Name: tg.sandbox} }},
	"ListSandboxes": {req: func(target, int) proto.Message { return &corralv1.ListSandboxesRequest{} },
		foreign: func(r proto.Message, own string, _ func(string) string) []string {
			return sandboxesOf(own, r.(*corralv1.ListSandboxesResponse).Sandboxes)
		}},
	"StopSandbox":   {addresses: true, req: func(tg target, _ int) proto.Message { return &corralv1.StopSandboxRequest{Name: tg.sandbox} }},
	"StartSandbox":  {addresses: true, req: func(tg target, _ int) proto.Message { return &corralv1.StartSandboxRequest{Name: tg.sandbox} }},
	"PauseSandbox":  {addresses: true, req: func(tg target, _ int) proto.Message { return &corralv1.PauseSandboxRequest{Name: tg.sandbox} }},
	"ResumeSandbox": {addresses: true, req: func(tg target, _ int) proto.Message { return &corralv1.ResumeSandboxRequest{Name: tg.sandbox} }},
	"DeleteSandbox": {addresses: true, req: func(tg target, _ int) proto.Message { return &corralv1.DeleteSandboxRequest{Name: tg.sandbox} }},
	"UpdateSandbox": {addresses: true, req: func(tg target, _ int) proto.Message {
		return &corralv1.UpdateSandboxRequest{Name: tg.sandbox, Policy: "limits:\n  pids: 100\n"}
	}},
	// a watch of a name waits for it to appear: another tenant's sandbox
	// is not there, it syncs with none
	"WatchSandboxes": {addresses: true, req: func(tg target, _ int) proto.Message { return &corralv1.WatchSandboxesRequest{Name: tg.sandbox} },
		hides: func(r proto.Message) bool { return r.(*corralv1.SandboxEvent).Type == "SYNCED" }},
	"WaitSandbox": {addresses: true, req: func(tg target, _ int) proto.Message {
		return &corralv1.WaitSandboxRequest{Name: tg.sandbox, Goal: "running"}
	}},
	"ListOperations": {addresses: true, req: func(tg target, _ int) proto.Message { return &corralv1.ListOperationsRequest{Name: tg.sandbox} }},
	"ExecSandbox": {addresses: true, req: func(tg target, _ int) proto.Message {
		return &corralv1.ExecRequest{Msg: &corralv1.ExecRequest_Start{Start: &corralv1.ExecStart{Name: tg.sandbox, Command: []string{"true"}}}}
	}},
	"SandboxLogs":  {addresses: true, req: func(tg target, _ int) proto.Message { return &corralv1.SandboxLogsRequest{Name: tg.sandbox} }},
	"Doctor":       {req: func(target, int) proto.Message { return &corralv1.DoctorRequest{} }},
	"ListReplicas": {req: func(target, int) proto.Message { return &corralv1.ListReplicasRequest{} }},
	"PullImage": {req: func(target, int) proto.Message {
		return &corralv1.PullImageRequest{Image: "busybox:latest", IfNeeded: true}
	}},
	"ListImages":     {req: func(target, int) proto.Message { return &corralv1.ListImagesRequest{} }},
	"RemoveImage":    {req: func(target, int) proto.Message { return &corralv1.RemoveImageRequest{Image: "no-such-image:1"} }},
	"PruneImages":    {req: func(target, int) proto.Message { return &corralv1.PruneImagesRequest{} }},
	"SandboxDenials": {addresses: true, req: func(tg target, _ int) proto.Message { return &corralv1.SandboxDenialsRequest{Name: tg.sandbox} }},
	"PortForward": {addresses: true, req: func(tg target, _ int) proto.Message {
		return &corralv1.PortForwardFrame{Name: tg.sandbox, Port: 8080}
	}},
	"ExposePort": {addresses: true, req: func(tg target, _ int) proto.Message {
		return &corralv1.ExposePortRequest{Name: tg.sandbox, Port: 8080, Address: "127.0.0.1:0"}
	}},
	"UnexposePort": {addresses: true, req: func(tg target, _ int) proto.Message {
		return &corralv1.UnexposePortRequest{Name: tg.sandbox, Port: 8080}
	}},
	"ListExposedPorts": {req: func(target, int) proto.Message { return &corralv1.ListExposedPortsRequest{} },
		foreign: func(r proto.Message, own string, tenantOf func(string) string) (out []string) {
			for _, p := range r.(*corralv1.ListExposedPortsResponse).Ports {
				if tn := tenantOf(p.SandboxId); tn != own {
					out = append(out, tn+"/"+p.SandboxName)
				}
			}
			return out
		}},
	"CreatePool": {req: func(tg target, n int) proto.Message {
		return &corralv1.CreatePoolRequest{Name: fmt.Sprintf("np-%d", n), Size: 1}
	}},
	"ListPools": {req: func(target, int) proto.Message { return &corralv1.ListPoolsRequest{} },
		foreign: func(r proto.Message, own string, _ func(string) string) (out []string) {
			for _, p := range r.(*corralv1.ListPoolsResponse).Pools {
				if p.Tenant != own {
					out = append(out, p.Tenant+"/"+p.Name)
				}
			}
			return out
		}},
	"DeletePool": {addresses: true, req: func(tg target, _ int) proto.Message { return &corralv1.DeletePoolRequest{Name: tg.pool} }},

	"CopyOut": {addresses: true, req: func(tg target, _ int) proto.Message {
		return &corralv1.CopyOutRequest{Sandbox: tg.sandbox, Path: "/sandbox"}
	}},
	"CopyIn": {addresses: true, req: func(tg target, _ int) proto.Message {
		return &corralv1.CopyInRequest{Msg: &corralv1.CopyInRequest_Header{Header: &corralv1.CopyInHeader{Sandbox: tg.sandbox, Path: "/sandbox"}}}
	}},
	"ReadFile": {addresses: true, req: func(tg target, _ int) proto.Message {
		return &corralv1.ReadFileRequest{Sandbox: tg.sandbox, Path: "/sandbox/f"}
	}},
	"WriteFile": {addresses: true, req: func(tg target, _ int) proto.Message {
		return &corralv1.WriteFileRequest{Msg: &corralv1.WriteFileRequest_Header{Header: &corralv1.WriteFileHeader{Sandbox: tg.sandbox, Path: "/sandbox/f"}}}
	}},
	"ListDir": {addresses: true, req: func(tg target, _ int) proto.Message {
		return &corralv1.ListDirRequest{Sandbox: tg.sandbox, Path: "/sandbox"}
	}},
	"StatFile": {addresses: true, req: func(tg target, _ int) proto.Message {
		return &corralv1.StatFileRequest{Sandbox: tg.sandbox, Path: "/sandbox"}
	}},
	"RemoveFile": {addresses: true, req: func(tg target, _ int) proto.Message {
		return &corralv1.RemoveFileRequest{Sandbox: tg.sandbox, Path: "/sandbox/f"}
	}},
	"MakeDir": {addresses: true, req: func(tg target, _ int) proto.Message {
		return &corralv1.MakeDirRequest{Sandbox: tg.sandbox, Path: "/sandbox/d"}
	}},
	"WatchDir": {addresses: true, req: func(tg target, _ int) proto.Message {
		return &corralv1.WatchDirRequest{Sandbox: tg.sandbox, Path: "/sandbox"}
	}},

	"CreateSecret": {req: func(tg target, n int) proto.Message {
		return &corralv1.CreateSecretRequest{Name: fmt.Sprintf("ns-%d", n), Value: []byte("v")}
	}},
	"UpdateSecret": {addresses: true, req: func(tg target, _ int) proto.Message {
		return &corralv1.UpdateSecretRequest{Name: tg.secret, Value: []byte("v2")}
	}},
	"GetSecret": {addresses: true, req: func(tg target, _ int) proto.Message { return &corralv1.GetSecretRequest{Name: tg.secret} }},
	"ListSecrets": {req: func(target, int) proto.Message { return &corralv1.ListSecretsRequest{} },
		foreign: func(r proto.Message, own string, _ func(string) string) (out []string) {
			for _, s := range r.(*corralv1.ListSecretsResponse).Secrets {
				if s.Tenant != own {
					out = append(out, s.Tenant+"/"+s.Name)
				}
			}
			return out
		}},
	"DeleteSecret": {addresses: true, req: func(tg target, _ int) proto.Message { return &corralv1.DeleteSecretRequest{Name: tg.secret} }},
	"SecretUsage":  {addresses: true, req: func(tg target, _ int) proto.Message { return &corralv1.SecretUsageRequest{Name: tg.secret} }},

	"CreateSnapshot": {addresses: true, req: func(tg target, n int) proto.Message {
		return &corralv1.CreateSnapshotRequest{Sandbox: tg.sandbox, Name: fmt.Sprintf("sn-%d", n)}
	}},
	"GetSnapshot": {addresses: true, req: func(tg target, _ int) proto.Message { return &corralv1.GetSnapshotRequest{Name: tg.snapshot} }},
	"ListSnapshots": {req: func(target, int) proto.Message { return &corralv1.ListSnapshotsRequest{} },
		foreign: func(r proto.Message, own string, _ func(string) string) (out []string) {
			for _, s := range r.(*corralv1.ListSnapshotsResponse).Snapshots {
				if s.Tenant != own {
					out = append(out, s.Tenant+"/"+s.Name)
				}
			}
			return out
		}},
	"DeleteSnapshot": {addresses: true, req: func(tg target, _ int) proto.Message { return &corralv1.DeleteSnapshotRequest{Name: tg.snapshot} }},
	"ExportSnapshot": {addresses: true, req: func(tg target, _ int) proto.Message { return &corralv1.ExportSnapshotRequest{Name: tg.snapshot} }},
	// an empty archive: refused as one, once the role allows the call
	"ImportSnapshot": {req: func(_ target, n int) proto.Message {
		return &corralv1.ImportSnapshotRequest{Name: fmt.Sprintf("im-%d", n)}
	}},
	"ForkSandbox": {addresses: true, req: func(tg target, n int) proto.Message {
		return &corralv1.ForkSandboxRequest{Sandbox: tg.sandbox, Count: 1, NamePrefix: fmt.Sprintf("fk-%d", n)}
	}},

	"CreateTenant": {req: func(_ target, n int) proto.Message {
		return &corralv1.CreateTenantRequest{Name: fmt.Sprintf("nt-%d", n)}
	}},
	"GetTenant":   {addresses: true, req: func(tg target, _ int) proto.Message { return &corralv1.GetTenantRequest{Name: tg.tenant} }},
	"ListTenants": {req: func(target, int) proto.Message { return &corralv1.ListTenantsRequest{} }},
	"UpdateTenant": {req: func(tg target, _ int) proto.Message {
		return &corralv1.UpdateTenantRequest{Name: tg.tenant, Quota: &corralv1.Quota{MaxSandboxes: 1000}}
	}},
	"DeleteTenant": {req: func(tg target, _ int) proto.Message { return &corralv1.DeleteTenantRequest{Name: tg.tenant} }},
	"CreateToken": {req: func(tg target, n int) proto.Message {
		return &corralv1.CreateTokenRequest{Tenant: tg.tenant, Role: "viewer", TtlSeconds: 60, Name: fmt.Sprintf("nk-%d", n)}
	}},
	"ListTokens":  {req: func(target, int) proto.Message { return &corralv1.ListTokensRequest{} }},
	"RevokeToken": {req: func(tg target, _ int) proto.Message { return &corralv1.RevokeTokenRequest{Name: tg.token} }},
}

// lastOnes run after every other RPC of an identity: they delete what the
// others act on.
var lastOnes = []string{"UnexposePort", "DeletePool", "DeleteSecret", "RevokeToken", "DeleteSnapshot", "DeleteSandbox", "DeleteTenant"}

// call makes one call of md on conn with req and returns the first reply
// (nil when the stream ended at once) and its error.
func call(ctx context.Context, conn *grpc.ClientConn, md protoreflect.MethodDescriptor, req proto.Message) (proto.Message, error) {
	full := fmt.Sprintf("/%s/%s", md.Parent().FullName(), md.Name())
	mt, err := protoregistry.GlobalTypes.FindMessageByName(md.Output().FullName())
	if err != nil {
		return nil, err
	}
	reply := mt.New().Interface()
	if !md.IsStreamingClient() && !md.IsStreamingServer() {
		return reply, conn.Invoke(ctx, full, req, reply)
	}
	desc := &grpc.StreamDesc{StreamName: string(md.Name()), ServerStreams: md.IsStreamingServer(), ClientStreams: md.IsStreamingClient()}
	s, err := conn.NewStream(ctx, desc, full)
	if err != nil {
		return nil, err
	}
	if err := s.SendMsg(req); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	if err := s.CloseSend(); err != nil {
		return nil, err
	}
	if err := s.RecvMsg(reply); errors.Is(err, io.EOF) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	return reply, nil
}

// Two tenants, each with a member (a client certificate) and a viewer (a
// token), and an admin (a token): every RPC of the API, read from its
// descriptors, is called by each on its own tenant's things and on the
// other tenant's. Only what the role allows passes (PermissionDenied
// names the role needed); another tenant's sandbox, pool, secret or
// tenant is NotFound, by name and by id; lists and watches show none of
// another tenant's; a caller without a certificate or a token is
// Unauthenticated before anything else.
func TestEveryRPCByEveryRole(t *testing.T) {
	home, certs := t.TempDir(), t.TempDir()
	addr := freePort(t)
	startGateway(t, home, "--listen", addr)
	for _, tn := range []string{"a", "b"} {
		mustCorral(t, home, "tenant", "create", tn)
		mustCorral(t, home, "gateway", "client-cert", "member-"+tn, "--tenant", tn, "--role", "member", "--out", certs)
	}
	token := func(tenant, role, name string) string {
		return lastLine(mustCorral(t, home, "token", "create", "--tenant", tenant, "--role", role, "--ttl", "1h", "--name", name))
	}
	type identity struct {
		id, tenant, other string
		role              caller.Role
		conn              *grpc.ClientConn
		elsewhere         *grpc.ClientConn // acting in the other tenant (admins only)
	}
	ids := []*identity{
		{id: "viewer-a", tenant: "a", other: "b", role: caller.Viewer},
		{id: "member-a", tenant: "a", other: "b", role: caller.Member},
		{id: "viewer-b", tenant: "b", other: "a", role: caller.Viewer},
		{id: "member-b", tenant: "b", other: "a", role: caller.Member},
		{id: "admin", tenant: caller.DefaultTenant, other: "b", role: caller.Admin},
	}
	for _, id := range ids {
		switch id.role {
		case caller.Member:
			id.conn = tlsConn(t, addr, certs, id.id, nil)
		default:
			tok := token(id.tenant, string(id.role), id.id)
			id.conn = tlsConn(t, addr, certs, "", &bearerCreds{token: tok})
			if id.role == caller.Admin {
				id.elsewhere = tlsConn(t, addr, certs, "", &bearerCreds{token: tok, tenant: id.other})
			}
		}
	}

	// The local admin makes each identity's things: in its tenant, and
	// others only in the other tenant.
	local := apiConn(t, home)
	in := func(tenant string) context.Context {
		return metadata.AppendToOutgoingContext(context.Background(), "corral-tenant", tenant)
	}
	sandboxes, secretsAPI := corralv1.NewSandboxServiceClient(local), corralv1.NewSecretServiceClient(local)
	snapshotsAPI := corralv1.NewSnapshotServiceClient(local)
	// make makes a tenant's sandbox (and its snapshot), pool and secret,
	// and returns the sandbox's id and the snapshot's
	make := func(tenant, sandbox, pool, secret string) (string, string) {
		ctx := in(tenant)
		resp, err := sandboxes.CreateSandbox(ctx, &corralv1.CreateSandboxRequest{Name: sandbox, Spec: &corralv1.SandboxSpec{Command: []string{"sleep", "1d"}}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sandboxes.CreatePool(ctx, &corralv1.CreatePoolRequest{Name: pool, Size: 1}); err != nil {
			t.Fatal(err)
		}
		if _, err := secretsAPI.CreateSecret(ctx, &corralv1.CreateSecretRequest{Name: secret, Value: []byte("s3cret")}); err != nil {
			t.Fatal(err)
		}
		waitPhase(t, sandboxes, resp.Sandbox.Id, "ready")
		snap, err := snapshotsAPI.CreateSnapshot(ctx, &corralv1.CreateSnapshotRequest{Sandbox: sandbox, Name: "n-" + sandbox})
		if err != nil {
			t.Fatal(err)
		}
		return resp.Sandbox.Id, snap.Id
	}
	own, other, otherByID := map[string]target{}, map[string]target{}, map[string]target{}
	for _, id := range ids {
		make(id.tenant, "t-"+id.id, "p-"+id.id, "s-"+id.id)
		xid, xsnap := make(id.other, "x-"+id.id, "q-"+id.id, "r-"+id.id)
		token(id.tenant, "viewer", "throw-"+id.id)
		own[id.id] = target{sandbox: "t-" + id.id, pool: "p-" + id.id, secret: "s-" + id.id, tenant: id.tenant, token: "throw-" + id.id,
			snapshot: "n-t-" + id.id}
		other[id.id] = target{sandbox: "x-" + id.id, pool: "q-" + id.id, secret: "r-" + id.id, tenant: id.other, token: "throw-" + id.id,
			snapshot: "n-x-" + id.id}
		otherByID[id.id] = target{sandbox: xid, pool: "q-" + id.id, secret: "r-" + id.id, tenant: id.other, snapshot: xsnap}
	}

	// Every RPC, from the descriptors; the rare ones that end the targets
	// go last.
	var methods []protoreflect.MethodDescriptor
	for _, f := range []protoreflect.FileDescriptor{corralv1.File_corral_v1_sandbox_proto, corralv1.File_corral_v1_files_proto,
		corralv1.File_corral_v1_secrets_proto, corralv1.File_corral_v1_tenants_proto, corralv1.File_corral_v1_snapshots_proto} {
		for i := range f.Services().Len() {
			s := f.Services().Get(i)
			for j := range s.Methods().Len() {
				methods = append(methods, s.Methods().Get(j))
			}
		}
	}
	slices.SortStableFunc(methods, func(x, y protoreflect.MethodDescriptor) int {
		return slices.Index(lastOnes, string(x.Name())) - slices.Index(lastOnes, string(y.Name()))
	})
	for _, md := range methods {
		full := fmt.Sprintf("/%s/%s", md.Parent().FullName(), md.Name())
		if _, ok := rpcs[string(md.Name())]; !ok {
			t.Errorf("%s has no case in this table: add one", full)
		}
		if _, ok := access.Needs(full); !ok {
			t.Errorf("%s has no rule in internal/access", full)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	// Without a certificate or a token, every RPC is refused before
	// anything else.
	nobody := tlsConn(t, addr, certs, "", nil)
	for _, md := range methods {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := call(ctx, nobody, md, rpcs[string(md.Name())].req(own["admin"], 0))
		cancel()
		if status.Code(err) != codes.Unauthenticated {
			t.Errorf("%s without a certificate or a token: %v, want Unauthenticated", md.Name(), err)
		}
	}

	// tenantOf is the tenant of a sandbox, as the local admin sees it.
	tenantOf := func(id string) string {
		sb, err := sandboxes.GetSandbox(context.Background(), &corralv1.GetSandboxRequest{Name: id})
		if err != nil {
			return "unknown: " + err.Error()
		}
		return sb.Tenant
	}
	n := 0
	for _, id := range ids {
		for _, md := range methods {
			c := rpcs[string(md.Name())]
			full := fmt.Sprintf("/%s/%s", md.Parent().FullName(), md.Name())
			need, _ := access.Needs(full)
			allowed := id.role.Allows(need)
			try := func(conn *grpc.ClientConn, tg target) (proto.Message, error) {
				n++
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				return call(ctx, conn, md, c.req(tg, n))
			}
			what := fmt.Sprintf("%s by %s", md.Name(), id.id)

			reply, err := try(id.conn, own[id.id])
			code := status.Code(err)
			switch {
			case !allowed:
				if code != codes.PermissionDenied || !strings.Contains(err.Error(), "needs the "+string(need)+" role") {
					t.Errorf("%s (a %s; it needs %s): %v, want PermissionDenied naming the role", what, id.role, need, err)
				}
				continue
			case code == codes.PermissionDenied || code == codes.Unauthenticated || (c.addresses && code == codes.NotFound):
				t.Errorf("%s on its own tenant's: %v", what, err)
			}
			if c.foreign != nil && err == nil && id.role != caller.Admin {
				if seen := c.foreign(reply, id.tenant, tenantOf); len(seen) > 0 {
					t.Errorf("%s shows another tenant's: %v", what, seen)
				}
			}
			if !c.addresses {
				continue
			}
			if id.role == caller.Admin {
				// an admin reaches any tenant's, acting in it
				if _, err := try(id.elsewhere, other[id.id]); status.Code(err) == codes.NotFound || status.Code(err) == codes.PermissionDenied {
					t.Errorf("%s in tenant %s: %v", what, id.other, err)
				}
				continue
			}
			for _, tg := range []target{other[id.id], otherByID[id.id]} {
				reply, err := try(id.conn, tg)
				if c.hides != nil && err == nil && c.hides(reply) {
					continue
				}
				if status.Code(err) != codes.NotFound {
					t.Errorf("%s on tenant %s's %+v: %v, want NotFound", what, id.other, tg, err)
				}
			}
		}
	}

	// A watch of every sandbox shows only the caller's tenant's.
	for _, id := range ids[:4] {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		w, err := corralv1.NewSandboxServiceClient(id.conn).WatchSandboxes(ctx, &corralv1.WatchSandboxesRequest{})
		if err != nil {
			t.Fatal(err)
		}
		for {
			ev, err := w.Recv()
			if err != nil {
				t.Fatalf("watch by %s: %v", id.id, err)
			}
			if ev.Type == "SYNCED" {
				break
			}
			if ev.Sandbox.Tenant != id.tenant {
				t.Errorf("watch by %s shows %s/%s", id.id, ev.Sandbox.Tenant, ev.Sandbox.Name)
			}
		}
		cancel()
	}
	// A member naming another tenant to act in is refused.
	forged := metadata.AppendToOutgoingContext(context.Background(), "corral-tenant", "b")
	if _, err := corralv1.NewSandboxServiceClient(ids[1].conn).ListSandboxes(forged, &corralv1.ListSandboxesRequest{}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("member-a acting in b: %v, want PermissionDenied", err)
	}
}

// Quotas hold under concurrent creates; a token works from the command
// line (--token, CORRAL_TOKEN, a context) and from `corral mcp`, as a
// member of its tenant; the journal says who did each step, also after a
// SIGKILL; a revoked or expired token is refused at once; no token is
// kept or logged in clear.
func TestTenantsTokensAndQuotas(t *testing.T) {
	home, certs := t.TempDir(), t.TempDir()
	addr := freePort(t)
	g := startGateway(t, home, "--listen", addr)
	mustCorral(t, home, "tenant", "create", "few", "--max-sandboxes", "5")
	mustCorral(t, home, "tenant", "create", "small", "--max-memory", "5Gi")
	mustCorral(t, home, "tenant", "create", "dev")
	mustCorral(t, home, "gateway", "client-cert", "unused", "--out", certs) // for ca.crt
	var tokens []string
	token := func(tenant, role string, args ...string) string {
		out := mustCorral(t, home, append([]string{"token", "create", "--tenant", tenant, "--role", role}, args...)...)
		tok := lastLine(out)
		if !strings.HasPrefix(tok, "corral_tk_") || strings.Count(out, tok) != 1 {
			t.Fatalf("token create printed:\n%s", out)
		}
		tokens = append(tokens, tok)
		return tok
	}

	// 20 creates at once into a quota of 5 sandboxes, and of 5Gi for
	// sandboxes of 1Gi each
	for _, tc := range []struct{ tenant, policy, want string }{
		{"few", "", "quota of 5 sandboxes is used up"},
		{"small", "version: 1\nlimits:\n  memory: 1Gi\n", "quota of 5Gi of memory is used up"},
	} {
		api := corralv1.NewSandboxServiceClient(tlsConn(t, addr, certs, "", &bearerCreds{token: token(tc.tenant, "member")}))
		errs := make(chan error, 20)
		for i := range 20 {
			go func() {
				_, err := api.CreateSandbox(context.Background(), &corralv1.CreateSandboxRequest{Name: fmt.Sprintf("c%d", i),
					Spec: &corralv1.SandboxSpec{Command: []string{"sleep", "1d"}, Policy: tc.policy}})
				errs <- err
			}()
		}
		made, refused := 0, 0
		for range 20 {
			switch err := <-errs; {
			case err == nil:
				made++
			case status.Code(err) == codes.ResourceExhausted && strings.Contains(err.Error(), tc.want):
				refused++
			default:
				t.Errorf("a create in %s: %v", tc.tenant, err)
			}
		}
		if made != 5 || refused != 15 {
			t.Errorf("%s: %d made and %d refused, want 5 and 15", tc.tenant, made, refused)
		}
		list, err := api.ListSandboxes(context.Background(), &corralv1.ListSandboxesRequest{})
		if err != nil || len(list.Sandboxes) != 5 {
			t.Errorf("%s's sandboxes: %d, %v; want 5", tc.tenant, len(list.GetSandboxes()), err)
		}
	}
	if out := mustCorral(t, home, "tenant", "get", "small"); !regexpMatch(`memory\s+5Gi\s+5Gi`, out) || !regexpMatch(`sandboxes\s+5\s+-`, out) {
		t.Errorf("tenant get small:\n%s", out)
	}

	// a member's token: the flag, the environment, a context
	member := token("dev", "member", "--name", "ci", "--ttl", "1h")
	viewer := token("dev", "viewer", "--name", "ro")
	cfgEnv := []string{"CORRAL_CONFIG=" + filepath.Join(t.TempDir(), "config"), "CORRAL_HOME="}
	mustCorralEnv(t, cfgEnv, "context", "add", "remote", "--gateway", "https://"+addr, "--ca", filepath.Join(certs, "ca.crt"), "--token", member)
	mustCorralEnv(t, cfgEnv, "sandbox", "create", "--name", "by-context", "--", "sleep", "1d")
	mustCorralEnv(t, []string{"CORRAL_TOKEN=" + member}, "--home", home, "sandbox", "create", "--name", "by-env", "--", "sleep", "1d")
	mustCorral(t, home, "--token", member, "sandbox", "stop", "by-env")
	out := mustCorralEnv(t, cfgEnv, "sandbox", "list")
	if !strings.Contains(out, "by-context") || !strings.Contains(out, "by-env") || regexpMatch(`(?m)^c0\s`, out) {
		t.Errorf("the member's list:\n%s", out)
	}
	if _, errOut, code := corral(t, home, "--token", viewer, "sandbox", "delete", "by-env"); code == 0 || !strings.Contains(errOut, "needs the member role") {
		t.Errorf("a viewer deleting: %d %s", code, errOut)
	}
	if _, errOut, code := corralEnv(t, cfgEnv, "gateway", "doctor"); code == 0 || !strings.Contains(errOut, "admin") {
		t.Errorf("a member's doctor: %d %s", code, errOut)
	}

	// corral mcp with the member's token: its tenant's sandboxes only, and
	// what it makes is the tenant's
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.Command(bin, "--home", home, "mcp", "--keep")
	cmd.Env = append(os.Environ(), "CORRAL_TOKEN="+member)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := mcpSession{t, cs}
	listed := s.must("sandbox_list", map[string]any{})
	if b, _ := json.Marshal(listed); !strings.Contains(string(b), "by-context") || strings.Contains(string(b), `"c0"`) {
		t.Errorf("sandbox_list over corral mcp with a member's token: %s", b)
	}
	s.must("sandbox_create", map[string]any{"name": "by-mcp"})
	cs.Close()
	local := corralv1.NewSandboxServiceClient(apiConn(t, home))
	sb, err := local.GetSandbox(metadata.AppendToOutgoingContext(context.Background(), "corral-tenant", "dev"), &corralv1.GetSandboxRequest{Name: "by-mcp"})
	if err != nil || sb.Tenant != "dev" {
		t.Fatalf("the sandbox corral mcp made: %v, %v", sb, err)
	}

	// MCP over HTTPS with the member's token, and no client certificate
	caPool, err := tlsauth.ClientConfig(filepath.Join(certs, "ca.crt"), "", "")
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Timeout: time.Minute, Transport: bearerTransport{token: member, base: &http.Transport{TLSClientConfig: caPool}}}
	overHTTPS, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: "https://" + addr + "/mcp", HTTPClient: hc}, nil)
	if err != nil {
		t.Fatal(err)
	}
	listed = mcpSession{t, overHTTPS}.must("sandbox_list", map[string]any{})
	overHTTPS.Close()
	if b, _ := json.Marshal(listed); !strings.Contains(string(b), "by-mcp") || strings.Contains(string(b), `"c0"`) {
		t.Errorf("sandbox_list over /mcp with a member's token: %s", b)
	}

	// who did each step, after a SIGKILL too
	g.signal(syscall.SIGKILL)
	g.exitCode(30 * time.Second)
	startGateway(t, home, "--listen", addr)
	hist := mustCorral(t, home, "--tenant", "dev", "sandbox", "history", "by-env", "-o", "json")
	for _, want := range []string{`"kind": "create"`, `"kind": "stop"`, `"actor": "token ci (`} {
		if !strings.Contains(hist, want) {
			t.Errorf("by-env's history after a SIGKILL lacks %s:\n%s", want, hist)
		}
	}
	var ops []struct{ Kind, Actor string }
	if err := json.Unmarshal([]byte(hist), &ops); err != nil {
		t.Fatal(err)
	}
	for _, op := range ops {
		if (op.Kind == "create" || op.Kind == "stop") && !strings.HasSuffix(op.Actor, ", tenant dev, member") {
			t.Errorf("%s by %q; want the token, its tenant and role", op.Kind, op.Actor)
		}
	}
	if table := mustCorral(t, home, "--tenant", "dev", "sandbox", "history", "by-env"); !strings.Contains(table, "BY") || !strings.Contains(table, "token ci (") {
		t.Errorf("history's table does not say who:\n%s", table)
	}

	// revoked and expired tokens are refused at once
	mustCorral(t, home, "token", "revoke", "ci")
	if _, errOut, code := corralEnv(t, cfgEnv, "sandbox", "list"); code == 0 || !strings.Contains(errOut, "was revoked") {
		t.Errorf("a revoked token: %d %s", code, errOut)
	}
	brief := token("dev", "member", "--ttl", "1s")
	time.Sleep(1500 * time.Millisecond)
	if _, errOut, code := corral(t, home, "--token", brief, "sandbox", "list"); code == 0 || !strings.Contains(errOut, "expired") {
		t.Errorf("an expired token: %d %s", code, errOut)
	}
	if _, errOut, code := corral(t, home, "--token", "corral_tk_forged", "sandbox", "list"); code == 0 || !strings.Contains(errOut, "unknown token") {
		t.Errorf("a forged token: %d %s", code, errOut)
	}

	// no token in clear in the home or the logs
	logs := g.logs.String()
	err = filepath.WalkDir(home, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Type()&fs.ModeSocket != 0 {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, tok := range tokens {
			if bytes.Contains(data, []byte(tok)) {
				t.Errorf("%s holds a token in clear", path)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range tokens {
		if strings.Contains(logs, tok) {
			t.Error("the gateway's log holds a token in clear")
		}
	}
}

// bearerTransport sends a bearer token with every request.
type bearerTransport struct {
	token string
	base  http.RoundTripper
}

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.base.RoundTrip(r)
}

func regexpMatch(pattern, s string) bool { return regexp.MustCompile(pattern).MatchString(s) }
