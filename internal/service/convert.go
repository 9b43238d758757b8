package service

import (
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

func ts(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

func toProto(sb *sandbox.Sandbox) *corralv1.Sandbox {
	if sb == nil {
		return nil
	}
	var exit *int32
	if sb.ExitCode != nil {
		code := int32(*sb.ExitCode)
		exit = &code
	}
	return &corralv1.Sandbox{
		Id:            sb.ID,
		Name:          sb.Name,
		Tenant:        sb.Tenant,
		PauseMemory:   sb.PauseMemory,
		Spec:          specToProto(sb.Spec),
		ExitCode:      exit,
		Restarts:      int32(sb.Restarts),
		Phase:         string(sb.Phase),
		DesiredState:  string(sb.Desired),
		Generation:    sb.Generation,
		Reason:        sb.Reason,
		CreatedAt:     ts(sb.CreatedAt),
		UpdatedAt:     ts(sb.UpdatedAt),
		Deadline:      ts(sb.Deadline),
		LastOperation: opToProto(sb.LastRequest),
		Revision:      sb.Revision,
	}
}

func opToProto(op *sandbox.Operation) *corralv1.Operation {
	if op == nil {
		return nil
	}
	return &corralv1.Operation{
		Id: op.ID, SandboxId: op.SandboxID, Kind: string(op.Kind), State: string(op.State), Owner: op.Owner,
		Attempt: int32(op.Attempt), Generation: op.Generation, StartedAt: ts(op.StartedAt),
		Deadline: ts(op.Deadline), FinishedAt: ts(op.FinishedAt), Error: op.Error, Detail: op.Detail,
		Actor: op.Actor, Epoch: op.Epoch,
	}
}

func specToProto(s sandbox.Spec) *corralv1.SandboxSpec {
	return &corralv1.SandboxSpec{Image: s.Image, Command: s.Command, Labels: s.Labels, Policy: s.Policy,
		RestartPolicy: s.RestartPolicy, MaxRestarts: int32(s.MaxRestarts), AddHosts: s.Hosts}
}

func specFromProto(s *corralv1.SandboxSpec) sandbox.Spec {
	if s == nil {
		return sandbox.Spec{}
	}
	return sandbox.Spec{Image: s.Image, Command: s.Command, Labels: s.Labels, Policy: s.Policy,
		RestartPolicy: s.RestartPolicy, MaxRestarts: int(s.MaxRestarts), Hosts: s.AddHosts}
}
