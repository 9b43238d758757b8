package service

import (
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
	for _, d := range past {
		if err := stream.Send(denialToProto(d)); err != nil {
			return err
		}
	}
	if next == nil {
		return nil
	}
	for {
		select {
		case <-stream.Context().Done():
			return nil
		case d, ok := <-next:
			if !ok {
				return nil // the sandbox is gone
			}
			if err := stream.Send(denialToProto(d)); err != nil {
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
