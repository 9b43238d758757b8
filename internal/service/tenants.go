package service

import (
	"context"
	"time"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
	"github.com/corral-sandbox/corral/internal/caller"
	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

// Tenants is what the tenant API and the edge's authentication ask of the
// core; *tenants.Tenants is the one implementation.
type Tenants interface {
	Create(ctx context.Context, name string, q sandbox.Quota) (*sandbox.Tenant, error)
	Get(ctx context.Context, name string) (*sandbox.Tenant, sandbox.Usage, error)
	List(ctx context.Context) ([]*sandbox.Tenant, error)
	Update(ctx context.Context, name string, q sandbox.Quota, fields []string) (*sandbox.Tenant, error)
	Delete(ctx context.Context, name string, force bool) (*sandbox.Tenant, error)
	CreateToken(ctx context.Context, tenant string, role caller.Role, ttl time.Duration, name string) (string, *sandbox.Token, error)
	ListTokens(ctx context.Context, tenant string) ([]*sandbox.Token, error)
	RevokeToken(ctx context.Context, nameOrID string) (*sandbox.Token, error)
	Authenticate(ctx context.Context, token string) (caller.Caller, error)
}

// tenantService implements corral.v1.TenantService on the core's tenants.
type tenantService struct {
	corralv1.UnimplementedTenantServiceServer
	t Tenants
}

func quotaFromProto(q *corralv1.Quota) sandbox.Quota {
	return sandbox.Quota{Sandboxes: int(q.GetMaxSandboxes()), Resources: sandbox.Resources{
		MemoryBytes: q.GetMaxMemoryBytes(), CPUMillis: q.GetMaxCpuMillis(), DiskBytes: q.GetMaxDiskBytes()},
		SnapshotBytes: q.GetMaxSnapshotBytes()}
}

func tenantToProto(t *sandbox.Tenant, u *sandbox.Usage) *corralv1.Tenant {
	out := &corralv1.Tenant{Name: t.Name, CreatedAt: ts(t.CreatedAt), UpdatedAt: ts(t.UpdatedAt),
		Quota: &corralv1.Quota{MaxSandboxes: int32(t.Quota.Sandboxes), MaxMemoryBytes: t.Quota.MemoryBytes,
			MaxCpuMillis: t.Quota.CPUMillis, MaxDiskBytes: t.Quota.DiskBytes, MaxSnapshotBytes: t.Quota.SnapshotBytes}}
	if u != nil {
		out.Usage = &corralv1.Usage{Sandboxes: int32(u.Sandboxes), MemoryBytes: u.MemoryBytes, CpuMillis: u.CPUMillis, DiskBytes: u.DiskBytes,
			SnapshotBytes: u.SnapshotBytes}
	}
	return out
}

func tokenToProto(t *sandbox.Token) *corralv1.Token {
	return &corralv1.Token{Id: t.ID, Name: t.Name, Tenant: t.Tenant, Role: t.Role,
		CreatedAt: ts(t.CreatedAt), ExpiresAt: ts(t.ExpiresAt), RevokedAt: ts(t.RevokedAt)}
}

// tenantAnswer is a tenant without its usage, or the error mapped.
func tenantAnswer(t *sandbox.Tenant, err error) (*corralv1.Tenant, error) {
	if err != nil {
		return nil, toGRPC(err)
	}
	return tenantToProto(t, nil), nil
}

func (s *tenantService) CreateTenant(ctx context.Context, req *corralv1.CreateTenantRequest) (*corralv1.Tenant, error) {
	return tenantAnswer(s.t.Create(ctx, req.GetName(), quotaFromProto(req.GetQuota())))
}

func (s *tenantService) GetTenant(ctx context.Context, req *corralv1.GetTenantRequest) (*corralv1.Tenant, error) {
	t, u, err := s.t.Get(ctx, req.GetName())
	if err != nil {
		return nil, toGRPC(err)
	}
	return tenantToProto(t, &u), nil
}

func (s *tenantService) ListTenants(ctx context.Context, _ *corralv1.ListTenantsRequest) (*corralv1.ListTenantsResponse, error) {
	list, err := s.t.List(ctx)
	if err != nil {
		return nil, toGRPC(err)
	}
	resp := &corralv1.ListTenantsResponse{}
	for _, t := range list {
		resp.Tenants = append(resp.Tenants, tenantToProto(t, nil))
	}
	return resp, nil
}

func (s *tenantService) UpdateTenant(ctx context.Context, req *corralv1.UpdateTenantRequest) (*corralv1.Tenant, error) {
	return tenantAnswer(s.t.Update(ctx, req.GetName(), quotaFromProto(req.GetQuota()), req.GetFields()))
}

func (s *tenantService) DeleteTenant(ctx context.Context, req *corralv1.DeleteTenantRequest) (*corralv1.Tenant, error) {
	return tenantAnswer(s.t.Delete(ctx, req.GetName(), req.GetForce()))
}

func (s *tenantService) CreateToken(ctx context.Context, req *corralv1.CreateTokenRequest) (*corralv1.CreateTokenResponse, error) {
	if req.GetTtlSeconds() <= 0 {
		return nil, toGRPC(errdefs.InvalidArgument("a token needs a ttl of 1 s or more"))
	}
	token, info, err := s.t.CreateToken(ctx, req.GetTenant(), caller.Role(req.GetRole()), time.Duration(req.GetTtlSeconds())*time.Second, req.GetName())
	if err != nil {
		return nil, toGRPC(err)
	}
	return &corralv1.CreateTokenResponse{Info: tokenToProto(info), Token: token}, nil
}

func (s *tenantService) ListTokens(ctx context.Context, req *corralv1.ListTokensRequest) (*corralv1.ListTokensResponse, error) {
	list, err := s.t.ListTokens(ctx, req.GetTenant())
	if err != nil {
		return nil, toGRPC(err)
	}
	resp := &corralv1.ListTokensResponse{}
	for _, t := range list {
		resp.Tokens = append(resp.Tokens, tokenToProto(t))
	}
	return resp, nil
}

func (s *tenantService) RevokeToken(ctx context.Context, req *corralv1.RevokeTokenRequest) (*corralv1.Token, error) {
	t, err := s.t.RevokeToken(ctx, req.GetName())
	if err != nil {
		return nil, toGRPC(err)
	}
	return tokenToProto(t), nil
}
