package service

import (
	"context"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
	"github.com/corral-sandbox/corral/internal/lifecycle"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

// Pools is what the API asks of the lifecycle about warm pools.
type Pools interface {
	CreatePool(ctx context.Context, name string, size int, spec sandbox.Spec) (*lifecycle.PoolStatus, error)
	ListPools(ctx context.Context) ([]*lifecycle.PoolStatus, error)
	DeletePool(ctx context.Context, name string) (*lifecycle.PoolStatus, error)
	Claim(ctx context.Context, name, requestID, pool string, spec sandbox.Spec) (*lifecycle.Claimed, error)
}

func poolToProto(p *lifecycle.PoolStatus) *corralv1.Pool {
	return &corralv1.Pool{Name: p.Name, Tenant: p.Tenant, Size: int32(p.Size), Ready: int32(p.Ready), Members: int32(p.Members),
		CreatedAt: ts(p.CreatedAt),
		Spec:      &corralv1.PoolSpec{Image: p.Spec.Image, Command: p.Spec.Command, Policy: p.Spec.Policy}}
}

// claim serves a CreateSandbox that names a pool.
func (s *service) claim(ctx context.Context, req *corralv1.CreateSandboxRequest) (*corralv1.CreateSandboxResponse, error) {
	c, err := s.pools.Claim(ctx, req.GetName(), req.GetRequestId(), req.GetPool(), specFromProto(req.GetSpec()))
	if err != nil {
		return nil, toGRPC(err)
	}
	return &corralv1.CreateSandboxResponse{Sandbox: toProto(c.Sandbox), Created: c.Created,
		FromPool: c.FromPool, PoolReason: c.Reason}, nil
}

func (s *service) CreatePool(ctx context.Context, req *corralv1.CreatePoolRequest) (*corralv1.Pool, error) {
	spec := req.GetSpec()
	p, err := s.pools.CreatePool(ctx, req.GetName(), int(req.GetSize()),
		sandbox.Spec{Image: spec.GetImage(), Command: spec.GetCommand(), Policy: spec.GetPolicy()})
	if err != nil {
		return nil, toGRPC(err)
	}
	return poolToProto(p), nil
}

func (s *service) ListPools(ctx context.Context, _ *corralv1.ListPoolsRequest) (*corralv1.ListPoolsResponse, error) {
	list, err := s.pools.ListPools(ctx)
	if err != nil {
		return nil, toGRPC(err)
	}
	resp := &corralv1.ListPoolsResponse{}
	for _, p := range list {
		resp.Pools = append(resp.Pools, poolToProto(p))
	}
	return resp, nil
}

func (s *service) DeletePool(ctx context.Context, req *corralv1.DeletePoolRequest) (*corralv1.Pool, error) {
	p, err := s.pools.DeletePool(ctx, req.GetName())
	if err != nil {
		return nil, toGRPC(err)
	}
	return poolToProto(p), nil
}
