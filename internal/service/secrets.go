package service

import (
	"context"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
	"github.com/corral-sandbox/corral/internal/secrets"
)

// Secrets is what the secret API asks of the core; *secrets.Secrets is the
// one implementation.
type Secrets interface {
	Create(ctx context.Context, name string, value []byte) (*secrets.Info, error)
	Update(ctx context.Context, name string, value []byte) (*secrets.Info, error)
	Get(ctx context.Context, name string) (*secrets.Info, error)
	List(ctx context.Context) ([]*secrets.Info, error)
	Delete(ctx context.Context, name string) (*secrets.Info, error)
}

// secretService implements corral.v1.SecretService on the core's secrets.
type secretService struct {
	corralv1.UnimplementedSecretServiceServer
	s Secrets
}

func secretToProto(i *secrets.Info) *corralv1.Secret {
	return &corralv1.Secret{Name: i.Name, Fingerprint: i.Fingerprint, CreatedAt: ts(i.CreatedAt), UpdatedAt: ts(i.UpdatedAt)}
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
	return answer(s.s.Delete(ctx, req.GetName()))
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
