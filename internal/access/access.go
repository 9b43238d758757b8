// Package access is the one place that decides whether a caller may make a
// request of the API: every RPC has a rule here, the role it needs, and
// every front end reaches the core through the check below. What a caller
// may see within the role (its own tenant's records) is the core's scope,
// read from the same caller.
package access

import (
	"github.com/corral-sandbox/corral/internal/caller"
	"github.com/corral-sandbox/corral/internal/errdefs"
)

// Public needs no caller at all: health checks.
const Public caller.Role = "public"

// rules is the role each RPC needs, by its full gRPC method name. An RPC
// without a rule is refused to everyone.
var rules = map[string]caller.Role{
	"/corral.v1.SandboxService/CreateSandbox":    caller.Member,
	"/corral.v1.SandboxService/GetSandbox":       caller.Viewer,
	"/corral.v1.SandboxService/ListSandboxes":    caller.Viewer,
	"/corral.v1.SandboxService/StopSandbox":      caller.Member,
	"/corral.v1.SandboxService/StartSandbox":     caller.Member,
	"/corral.v1.SandboxService/PauseSandbox":     caller.Member,
	"/corral.v1.SandboxService/ResumeSandbox":    caller.Member,
	"/corral.v1.SandboxService/DeleteSandbox":    caller.Member,
	"/corral.v1.SandboxService/UpdateSandbox":    caller.Member,
	"/corral.v1.SandboxService/WatchSandboxes":   caller.Viewer,
	"/corral.v1.SandboxService/WaitSandbox":      caller.Viewer,
	"/corral.v1.SandboxService/ListOperations":   caller.Viewer,
	"/corral.v1.SandboxService/ExecSandbox":      caller.Member,
	"/corral.v1.SandboxService/SandboxLogs":      caller.Viewer,
	"/corral.v1.SandboxService/Doctor":           caller.Admin,
	"/corral.v1.SandboxService/ListReplicas":     caller.Admin,
	"/corral.v1.SandboxService/PullImage":        caller.Member,
	"/corral.v1.SandboxService/ListImages":       caller.Viewer,
	"/corral.v1.SandboxService/RemoveImage":      caller.Admin, // images are every tenant's
	"/corral.v1.SandboxService/PruneImages":      caller.Admin,
	"/corral.v1.SandboxService/SandboxDenials":   caller.Viewer,
	"/corral.v1.SandboxService/PortForward":      caller.Member,
	"/corral.v1.SandboxService/ExposePort":       caller.Member,
	"/corral.v1.SandboxService/UnexposePort":     caller.Member,
	"/corral.v1.SandboxService/ListExposedPorts": caller.Viewer,
	"/corral.v1.SandboxService/CreatePool":       caller.Member,
	"/corral.v1.SandboxService/ListPools":        caller.Viewer,
	"/corral.v1.SandboxService/DeletePool":       caller.Member,

	// A sandbox's files are its data: reading them is driving it.
	"/corral.v1.FileService/CopyOut":    caller.Member,
	"/corral.v1.FileService/CopyIn":     caller.Member,
	"/corral.v1.FileService/ReadFile":   caller.Member,
	"/corral.v1.FileService/WriteFile":  caller.Member,
	"/corral.v1.FileService/ListDir":    caller.Member,
	"/corral.v1.FileService/StatFile":   caller.Member,
	"/corral.v1.FileService/RemoveFile": caller.Member,
	"/corral.v1.FileService/MakeDir":    caller.Member,
	"/corral.v1.FileService/WatchDir":   caller.Member,

	// Secrets' values never leave the gateway; their names and uses do.
	"/corral.v1.SecretService/CreateSecret": caller.Member,
	"/corral.v1.SecretService/UpdateSecret": caller.Member,
	"/corral.v1.SecretService/GetSecret":    caller.Viewer,
	"/corral.v1.SecretService/ListSecrets":  caller.Viewer,
	"/corral.v1.SecretService/DeleteSecret": caller.Member,
	"/corral.v1.SecretService/SecretUsage":  caller.Viewer,

	// A snapshot holds a sandbox's files: taking, exporting or using one
	// is a member's, as the files are.
	"/corral.v1.SnapshotService/CreateSnapshot": caller.Member,
	"/corral.v1.SnapshotService/GetSnapshot":    caller.Viewer,
	"/corral.v1.SnapshotService/ListSnapshots":  caller.Viewer,
	"/corral.v1.SnapshotService/DeleteSnapshot": caller.Member,
	"/corral.v1.SnapshotService/ExportSnapshot": caller.Member,
	"/corral.v1.SnapshotService/ImportSnapshot": caller.Member,
	"/corral.v1.SnapshotService/ForkSandbox":    caller.Member,

	"/corral.v1.TenantService/CreateTenant": caller.Admin,
	"/corral.v1.TenantService/GetTenant":    caller.Viewer, // its own tenant, with its use of the quota
	"/corral.v1.TenantService/ListTenants":  caller.Admin,
	"/corral.v1.TenantService/UpdateTenant": caller.Admin,
	"/corral.v1.TenantService/DeleteTenant": caller.Admin,
	"/corral.v1.TenantService/CreateToken":  caller.Admin,
	"/corral.v1.TenantService/ListTokens":   caller.Admin,
	"/corral.v1.TenantService/RevokeToken":  caller.Admin,

	"/grpc.health.v1.Health/Check": Public,
	"/grpc.health.v1.Health/Watch": Public,
	"/grpc.health.v1.Health/List":  Public,

	"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo":      caller.Viewer,
	"/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo": caller.Viewer,
}

// Needs is the role method needs, and false when it has no rule.
func Needs(method string) (caller.Role, bool) {
	r, ok := rules[method]
	return r, ok
}

// Check decides whether c may call method: nil, or a PermissionDenied
// error that names the role it would need.
func Check(c caller.Caller, method string) error {
	need, ok := rules[method]
	switch {
	case !ok:
		return errdefs.PermissionDenied("%s is not open to any caller", method)
	case need == Public || c.Role.Allows(need):
		return nil
	}
	return errdefs.PermissionDenied("%s is %s of tenant %s; %s needs the %s role", c.Name, article(c.Role), c.Tenant, shortName(method), need)
}

func article(r caller.Role) string {
	if r == caller.Admin {
		return "an admin"
	}
	return "a " + string(r)
}

// shortName is a method's name without its service: "CreateSandbox".
func shortName(method string) string {
	for i := len(method) - 1; i >= 0; i-- {
		if method[i] == '/' {
			return method[i+1:]
		}
	}
	return method
}
