package service

import (
	"context"

	"google.golang.org/protobuf/types/known/timestamppb"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

func (s *service) SandboxDenials(req *corralv1.SandboxDenialsRequest, stream corralv1.SandboxService_SandboxDenialsServer) error {
	past, next, stop, err := s.m.Denials(stream.Context(), req.GetName(), req.GetFollow())
	if err != nil {
		return toGRPC(err)
	}
	defer stop()
	return sendAll(stream.Context(), past, next, func(d sandbox.EgressDecision) error { return stream.Send(denialToProto(d)) })
}

// sendAll sends the past entries of a ledger, then those of next until it
// ends (its sandbox or secret is gone) or the caller goes.
func sendAll[T any](ctx context.Context, past []T, next <-chan T, send func(T) error) error {
	for _, v := range past {
		if err := send(v); err != nil {
			return err
		}
	}
	if next == nil {
		return nil
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case v, ok := <-next:
			if !ok {
				return nil
			}
			if err := send(v); err != nil {
				return err
			}
		}
	}
}

func denialToProto(d sandbox.EgressDecision) *corralv1.Denial {
	out := &corralv1.Denial{Time: timestamppb.New(d.Time), Host: d.Host, Port: int32(d.Port), Method: d.Method,
		Path: d.Path, Verdict: d.Verdict, Policy: d.Policy, Reason: d.Reason}
	if d.Addr.IsValid() {
		out.Address = d.Addr.String()
	}
	return out
}
