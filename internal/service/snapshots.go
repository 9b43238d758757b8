package service

import (
	"context"
	"io"

	"google.golang.org/grpc"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

// Snapshots is what the snapshot API asks of the core;
// *snapshots.Snapshots is the one implementation.
type Snapshots interface {
	Take(ctx context.Context, nameOrID, name string, memory bool) (*sandbox.Snapshot, error)
	Get(ctx context.Context, nameOrID string) (*sandbox.Snapshot, error)
	List(ctx context.Context) ([]*sandbox.Snapshot, error)
	Delete(ctx context.Context, nameOrID string) (*sandbox.Snapshot, error)
	Export(ctx context.Context, nameOrID string, w io.Writer) error
	Import(ctx context.Context, name string, r io.Reader) (*sandbox.Snapshot, error)
	Fork(ctx context.Context, nameOrID string, count int, prefix string, labels map[string]string) ([]*sandbox.Sandbox, error)
	CreateFrom(ctx context.Context, snapshot, name, requestID string, spec sandbox.Spec) (*sandbox.Sandbox, bool, error)
}

// snapshotService implements corral.v1.SnapshotService on the core's
// snapshots.
type snapshotService struct {
	corralv1.UnimplementedSnapshotServiceServer
	s Snapshots
}

func snapshotToProto(s *sandbox.Snapshot) *corralv1.Snapshot {
	return &corralv1.Snapshot{Id: s.ID, Name: s.Name, Tenant: s.Tenant, Sandbox: s.SourceName, Spec: specToProto(s.Spec),
		Files: s.Files, Bytes: s.Bytes, CreatedAt: ts(s.CreatedAt)}
}

// snapshotAnswer is a snapshot's record, or the error mapped to its code.
func snapshotAnswer(s *sandbox.Snapshot, err error) (*corralv1.Snapshot, error) {
	if err != nil {
		return nil, toGRPC(err)
	}
	return snapshotToProto(s), nil
}

func (s *snapshotService) CreateSnapshot(ctx context.Context, req *corralv1.CreateSnapshotRequest) (*corralv1.Snapshot, error) {
	return snapshotAnswer(s.s.Take(ctx, req.GetSandbox(), req.GetName(), req.GetMemory()))
}

func (s *snapshotService) GetSnapshot(ctx context.Context, req *corralv1.GetSnapshotRequest) (*corralv1.Snapshot, error) {
	return snapshotAnswer(s.s.Get(ctx, req.GetName()))
}

func (s *snapshotService) ListSnapshots(ctx context.Context, _ *corralv1.ListSnapshotsRequest) (*corralv1.ListSnapshotsResponse, error) {
	list, err := s.s.List(ctx)
	if err != nil {
		return nil, toGRPC(err)
	}
	out := &corralv1.ListSnapshotsResponse{}
	for _, snap := range list {
		out.Snapshots = append(out.Snapshots, snapshotToProto(snap))
	}
	return out, nil
}

func (s *snapshotService) DeleteSnapshot(ctx context.Context, req *corralv1.DeleteSnapshotRequest) (*corralv1.Snapshot, error) {
	return snapshotAnswer(s.s.Delete(ctx, req.GetName()))
}

func (s *snapshotService) ExportSnapshot(req *corralv1.ExportSnapshotRequest, stream grpc.ServerStreamingServer[corralv1.SnapshotChunk]) error {
	out := chunker(func(p []byte) error { return stream.Send(&corralv1.SnapshotChunk{Data: p}) })
	return toGRPC(s.s.Export(stream.Context(), req.GetName(), out))
}

func (s *snapshotService) ImportSnapshot(stream grpc.ClientStreamingServer[corralv1.ImportSnapshotRequest, corralv1.Snapshot]) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	r, w := io.Pipe()
	go func() {
		_, err := w.Write(first.GetData())
		for err == nil {
			var msg *corralv1.ImportSnapshotRequest
			if msg, err = stream.Recv(); err == nil {
				_, err = w.Write(msg.GetData())
			}
		}
		if err == io.EOF {
			err = nil
		}
		w.CloseWithError(err)
	}()
	ctx := stream.Context()
	context.AfterFunc(ctx, func() { r.CloseWithError(ctx.Err()) })
	snap, err := s.s.Import(ctx, first.GetName(), r)
	r.CloseWithError(io.ErrClosedPipe)
	if err != nil {
		return toGRPC(err)
	}
	return stream.SendAndClose(snapshotToProto(snap))
}

func (s *snapshotService) ForkSandbox(ctx context.Context, req *corralv1.ForkSandboxRequest) (*corralv1.ForkSandboxResponse, error) {
	forks, err := s.s.Fork(ctx, req.GetSandbox(), int(req.GetCount()), req.GetNamePrefix(), req.GetLabels())
	if err != nil {
		return nil, toGRPC(err)
	}
	out := &corralv1.ForkSandboxResponse{}
	for _, sb := range forks {
		out.Sandboxes = append(out.Sandboxes, toProto(sb))
	}
	return out, nil
}
