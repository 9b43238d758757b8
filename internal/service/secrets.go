package service

import (
	"context"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/secrets"
)

// Secrets is what the secret API asks of the core; *secrets.Secrets is the
// one implementation.
type Secrets interface {
	Create(ctx context.Context, name string, value []byte) (*secrets.Info, error)
	Update(ctx context.Context, name string, value []byte) (*secrets.Info, error)
	Get(ctx context.Context, name string) (*secrets.Info, error)
	List(ctx context.Context) ([]*secrets.Info, error)
	Delete(ctx context.Context, name string, force bool) (*secrets.Info, error)
	Usage(ctx context.Context, name string, follow bool) ([]sandbox.CredentialUse, <-chan sandbox.CredentialUse, func(), error)
}

// secretService implements corral.v1.SecretService on the core's secrets.
type secretService struct {
	corralv1.UnimplementedSecretServiceServer
	s Secrets
}

func secretToProto(i *secrets.Info) *corralv1.Secret {
	out := &corralv1.Secret{Name: i.Name, Tenant: i.Tenant, Fingerprint: i.Fingerprint, CreatedAt: ts(i.CreatedAt), UpdatedAt: ts(i.UpdatedAt), BoundBy: i.BoundBy}
	if i.LastUse != nil {
		out.LastUse = useToProto(*i.LastUse)
	}
	return out
}

func useToProto(u sandbox.CredentialUse) *corralv1.CredentialUse {
	return &corralv1.CredentialUse{Seq: u.Seq, Time: ts(u.Time), Secret: u.Secret, Credential: u.Credential, Sandbox: u.Sandbox,
		SandboxId: u.SandboxID, Host: u.Host, Port: int32(u.Port), Method: u.Method, Path: u.Path, Verdict: u.Verdict,
		Reason: u.Reason, Status: int32(u.Status)}
}

// answer is a secret's description, or the error mapped to its code.
func answer(i *secrets.Info, err error) (*corralv1.Secret, error) {
	if err != nil {
		return nil, toGRPC(err)
	}
	return secretToProto(i), nil
}

func (s *secretService) CreateSecret(ctx context.Context, req *corralv1.CreateSecretRequest) (*corralv1.Secret, error) {
	return answer(s.s.Create(ctx, req.GetName(), req.GetValue()))
}

func (s *secretService) UpdateSecret(ctx context.Context, req *corralv1.UpdateSecretRequest) (*corralv1.Secret, error) {
	return answer(s.s.Update(ctx, req.GetName(), req.GetValue()))
}

func (s *secretService) GetSecret(ctx context.Context, req *corralv1.GetSecretRequest) (*corralv1.Secret, error) {
	return answer(s.s.Get(ctx, req.GetName()))
}

func (s *secretService) DeleteSecret(ctx context.Context, req *corralv1.DeleteSecretRequest) (*corralv1.Secret, error) {
	return answer(s.s.Delete(ctx, req.GetName(), req.GetForce()))
}

func (s *secretService) SecretUsage(req *corralv1.SecretUsageRequest, stream corralv1.SecretService_SecretUsageServer) error {
	past, next, stop, err := s.s.Usage(stream.Context(), req.GetName(), req.GetFollow())
	if err != nil {
		return toGRPC(err)
	}
	defer stop()
	return sendAll(stream.Context(), past, next, func(u sandbox.CredentialUse) error { return stream.Send(useToProto(u)) })
}

func (s *secretService) ListSecrets(ctx context.Context, _ *corralv1.ListSecretsRequest) (*corralv1.ListSecretsResponse, error) {
	list, err := s.s.List(ctx)
	if err != nil {
		return nil, toGRPC(err)
	}
	resp := &corralv1.ListSecretsResponse{}
	for _, i := range list {
		resp.Secrets = append(resp.Secrets, secretToProto(i))
	}
	return resp, nil
}
