package service

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
	"github.com/corral-sandbox/corral/internal/exposed"
	"github.com/corral-sandbox/corral/internal/tunnel"
)

// Porter is what the API asks of the core about exposed ports;
// *exposed.Ports implements it.
type Porter interface {
	Expose(ctx context.Context, nameOrID string, port int, address string) (exposed.Exposed, error)
	Unexpose(ctx context.Context, nameOrID string, port int) (exposed.Exposed, error)
	ExposedPorts(ctx context.Context, nameOrID string) ([]exposed.Exposed, error)
}

// PortForward joins the call to one connection to the sandbox's port.
func (s *service) PortForward(stream corralv1.SandboxService_PortForwardServer) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	if first.GetName() == "" || len(first.GetData()) > 0 || first.GetCloseWrite() {
		return status.Error(codes.InvalidArgument, "the first port-forward frame names the sandbox and the port, and carries no data")
	}
	c, err := s.m.DialPort(stream.Context(), first.GetName(), int(first.GetPort()))
	if err != nil {
		return toGRPC(err)
	}
	defer c.Close()
	inside, ok := c.(tunnel.Side)
	if !ok {
		return status.Errorf(codes.Internal, "a connection to a sandbox's port cannot half-close (%T)", c)
	}
	if err := tunnel.Join(&tunnel.Frames{Send: stream.Send, Recv: stream.Recv}, inside); err != nil {
		if ctxErr := stream.Context().Err(); ctxErr != nil {
			return status.FromContextError(ctxErr).Err()
		}
		return status.Errorf(codes.Unavailable, "port %d of sandbox %q: %v", first.GetPort(), first.GetName(), err)
	}
	return nil
}

func (s *service) ExposePort(ctx context.Context, req *corralv1.ExposePortRequest) (*corralv1.ExposedPort, error) {
	e, err := s.ports.Expose(ctx, req.GetName(), int(req.GetPort()), req.GetAddress())
	if err != nil {
		return nil, toGRPC(err)
	}
	return exposedToProto(e), nil
}

func (s *service) UnexposePort(ctx context.Context, req *corralv1.UnexposePortRequest) (*corralv1.ExposedPort, error) {
	e, err := s.ports.Unexpose(ctx, req.GetName(), int(req.GetPort()))
	if err != nil {
		return nil, toGRPC(err)
	}
	return exposedToProto(e), nil
}

func (s *service) ListExposedPorts(ctx context.Context, req *corralv1.ListExposedPortsRequest) (*corralv1.ListExposedPortsResponse, error) {
	list, err := s.ports.ExposedPorts(ctx, req.GetName())
	if err != nil {
		return nil, toGRPC(err)
	}
	resp := &corralv1.ListExposedPortsResponse{}
	for _, e := range list {
		resp.Ports = append(resp.Ports, exposedToProto(e))
	}
	return resp, nil
}

func exposedToProto(e exposed.Exposed) *corralv1.ExposedPort {
	out := &corralv1.ExposedPort{SandboxId: e.SandboxID, SandboxName: e.SandboxName, Port: int32(e.Port), Address: e.Address}
	if e.Err != nil {
		out.Error = e.Err.Error()
	}
	return out
}
