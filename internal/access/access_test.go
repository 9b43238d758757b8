package access

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
	"github.com/corral-sandbox/corral/internal/caller"
	"github.com/corral-sandbox/corral/internal/errdefs"
)

// methods are the full gRPC names of every RPC of corral's API, read from
// the generated descriptors.
func methods() []string {
	var out []string
	for _, f := range []protoreflect.FileDescriptor{corralv1.File_corral_v1_sandbox_proto, corralv1.File_corral_v1_files_proto,
		corralv1.File_corral_v1_secrets_proto, corralv1.File_corral_v1_tenants_proto, corralv1.File_corral_v1_snapshots_proto} {
		for i := range f.Services().Len() {
			s := f.Services().Get(i)
			for j := range s.Methods().Len() {
				out = append(out, fmt.Sprintf("/%s/%s", s.FullName(), s.Methods().Get(j).Name()))
			}
		}
	}
	return out
}

// An RPC added to the API without a rule here fails this test (and is
// refused to everyone meanwhile); a rule of an RPC that is gone does too.
func TestEveryRPCHasARule(t *testing.T) {
	all := methods()
	if len(all) < 40 {
		t.Fatalf("read %d RPCs from the descriptors; are they all registered?", len(all))
	}
	known := map[string]bool{}
	for _, m := range all {
		known[m] = true
		if _, ok := Needs(m); !ok {
			t.Errorf("%s has no rule in access", m)
		}
	}
	for m := range rules {
		if strings.HasPrefix(m, "/corral.") && !known[m] {
			t.Errorf("access has a rule for %s, which the API does not have", m)
		}
	}
}

func TestCheckNamesTheRoleNeeded(t *testing.T) {
	viewer := caller.Caller{Name: "token ro", Tenant: "acme", Role: caller.Viewer}
	err := Check(viewer, "/corral.v1.SandboxService/DeleteSandbox")
	if err == nil || !strings.Contains(err.Error(), "DeleteSandbox needs the member role") || !strings.Contains(err.Error(), "a viewer of tenant acme") {
		t.Errorf("a viewer deleting: %v", err)
	}
	if err := Check(viewer, "/corral.v1.SandboxService/ListSandboxes"); err != nil {
		t.Errorf("a viewer listing: %v", err)
	}
	member := caller.Caller{Name: "cert m", Tenant: "acme", Role: caller.Member}
	if err := Check(member, "/corral.v1.TenantService/CreateToken"); err == nil || !strings.Contains(err.Error(), "needs the admin role") {
		t.Errorf("a member making a token: %v", err)
	}
	if err := Check(caller.Caller{Name: "nobody"}, "/corral.v1.SandboxService/ListSandboxes"); err == nil {
		t.Error("a caller without a role listed")
	}
	if err := Check(caller.Local, "/corral.v1.SandboxService/NoSuchRPC"); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Errorf("an RPC without a rule, by an admin: %v", err)
	}
	if err := Check(caller.Caller{}, "/grpc.health.v1.Health/Check"); err != nil {
		t.Errorf("a health check: %v", err)
	}
}
