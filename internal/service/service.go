// Package service is the API edge: corral.v1.SandboxService (and
// corral.v1.FileService, in files.go) over gRPC on
// the lifecycle's requests. It maps errors to gRPC codes here and nowhere
// else. It knows the lifecycle only through Lifecycle, and no driver or
// store at all; which ones serve it is the wiring's business
// (internal/gateway).
package service

import (
	"context"
	"io"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/lifecycle"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

// Lifecycle is what the API asks of the lifecycle: the requests it
// serves, one method each. *lifecycle.Manager is the one implementation.
type Lifecycle interface {
	Create(ctx context.Context, name, requestID string, spec sandbox.Spec) (*sandbox.Sandbox, bool, error)
	Get(ctx context.Context, nameOrID string) (*sandbox.Sandbox, error)
	ListPage(ctx context.Context, opts lifecycle.ListOptions) (*lifecycle.Page, error)
	Operations(ctx context.Context, nameOrID string) ([]*sandbox.Operation, error)
	Stop(ctx context.Context, nameOrID string) (*sandbox.Sandbox, error)
	Start(ctx context.Context, nameOrID string) (*sandbox.Sandbox, error)
	Pause(ctx context.Context, nameOrID string, memory bool) (*sandbox.Sandbox, error)
	Resume(ctx context.Context, nameOrID string) (*sandbox.Sandbox, error)
	Delete(ctx context.Context, nameOrID string, force bool) (*sandbox.Sandbox, error)
	AssumeGone(ctx context.Context, nameOrID string, force bool, why string) (*sandbox.Sandbox, error)
	UpdatePolicy(ctx context.Context, nameOrID, text string) (*sandbox.Sandbox, error)
	Protections(ctx context.Context, sb *sandbox.Sandbox) string
	Network(ctx context.Context, sb *sandbox.Sandbox) string
	Denials(ctx context.Context, nameOrID string, follow bool) ([]sandbox.EgressDecision, <-chan sandbox.EgressDecision, func(), error)
	Doctor(ctx context.Context) ([]lifecycle.Finding, error)
	Tiers(ctx context.Context) []driver.Tier
	Stats() (lifecycle.Stats, error)
	WatchSandboxes(ctx context.Context, name string) (<-chan lifecycle.Event, error)
	Wait(ctx context.Context, nameOrID string, goal lifecycle.Goal, since int64, progress func(*sandbox.Sandbox)) (*sandbox.Sandbox, error)
	Exec(ctx context.Context, nameOrID string, opts driver.ExecOptions) (int, error)
	DialPort(ctx context.Context, nameOrID string, port int) (net.Conn, error)
	Logs(ctx context.Context, nameOrID string, opts driver.LogOptions, stdout, stderr io.Writer) error
}

var _ Lifecycle = (*lifecycle.Manager)(nil)

// Core is the API core the service translates to: the lifecycle and the
// parts beside it. Every front end serves the same one.
type Core struct {
	Sandboxes Lifecycle
	Files     Files
	Images    Imager
	Ports     Porter
	Pools     Pools
	Secrets   Secrets
	// Tenants, when set, serves the tenant API and checks bearer tokens.
	Tenants Tenants
	// Snapshots, when set, serves the snapshot API and creates from
	// snapshots.
	Snapshots Snapshots
	// Replicas, when set, lists the gateways of the store (ListReplicas,
	// and doctor's report).
	Replicas Replicas
}

// Replicas lists the gateways of the store, the leader first, and the
// lease's TTL, within which a live one has said so.
type Replicas interface {
	Replicas(ctx context.Context) ([]sandbox.Replica, time.Duration, error)
}

// service implements corral.v1.SandboxService on the core.
type service struct {
	corralv1.UnimplementedSandboxServiceServer
	m      Lifecycle
	images Imager
	ports  Porter
	pools  Pools
	snaps  Snapshots
	// replicas is nil where the core lists none (tests of the core)
	replicas Replicas
}

// New is the sandbox API served on the core.
func New(c Core) corralv1.SandboxServiceServer {
	return &service{m: c.Sandboxes, images: c.Images, ports: c.Ports, pools: c.Pools, snaps: c.Snapshots, replicas: c.Replicas}
}

// NewServer is a gRPC server with the API, health checking and
// reflection; the caller gives it its listeners.
func NewServer(c Core, opts ...grpc.ServerOption) *grpc.Server {
	opts = append(StreamOptions(), opts...)
	g := Gate{Tenants: c.Tenants}
	srv := grpc.NewServer(append(opts, grpc.ChainUnaryInterceptor(g.unary), grpc.ChainStreamInterceptor(g.stream))...)
	corralv1.RegisterSandboxServiceServer(srv, New(c))
	corralv1.RegisterFileServiceServer(srv, NewFiles(c.Files))
	if c.Secrets != nil {
		corralv1.RegisterSecretServiceServer(srv, &secretService{s: c.Secrets})
	}
	if c.Tenants != nil {
		corralv1.RegisterTenantServiceServer(srv, &tenantService{t: c.Tenants})
	}
	if c.Snapshots != nil {
		corralv1.RegisterSnapshotServiceServer(srv, &snapshotService{s: c.Snapshots})
	}
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus(corralv1.SandboxService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus(corralv1.FileService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus(corralv1.SecretService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus(corralv1.TenantService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(srv, hs)
	reflection.Register(srv)
	return srv
}

// StreamOptions size the server's HTTP/2 windows and buffers for file
// copies: gRPC's defaults (64 KiB windows, 32 KiB buffers) cost a round
// trip and several small writes per 64 KiB of a copy. Memory per stream
// stays bounded by the window.
func StreamOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.InitialWindowSize(streamWindow), grpc.InitialConnWindowSize(streamWindow),
		grpc.ReadBufferSize(streamBuffer), grpc.WriteBufferSize(streamBuffer),
		grpc.MaxConcurrentStreams(maxStreamsPerConn),
	}
}

// The HTTP/2 flow-control window of a stream (and of a connection) and
// the size of the transport's read and write buffers.
const (
	streamWindow = 4 << 20
	streamBuffer = 256 << 10
	// maxStreamsPerConn bounds the calls one client connection has open
	// at once (watches, execs, logs): the rest wait for one to end.
	maxStreamsPerConn = 256
)

func (s *service) CreateSandbox(ctx context.Context, req *corralv1.CreateSandboxRequest) (*corralv1.CreateSandboxResponse, error) {
	if req.GetPool() != "" {
		if req.GetFromSnapshot() != "" {
			return nil, status.Error(codes.InvalidArgument, "a create takes a pool or a snapshot, not both")
		}
		return s.claim(ctx, req)
	}
	create := s.m.Create
	if snap := req.GetFromSnapshot(); snap != "" {
		if s.snaps == nil {
			return nil, status.Error(codes.Unimplemented, "this gateway keeps no snapshots")
		}
		create = func(ctx context.Context, name, requestID string, spec sandbox.Spec) (*sandbox.Sandbox, bool, error) {
			return s.snaps.CreateFrom(ctx, snap, name, requestID, spec)
		}
	}
	sb, created, err := create(ctx, req.GetName(), req.GetRequestId(), specFromProto(req.GetSpec()))
	if err != nil {
		return nil, toGRPC(err)
	}
	return &corralv1.CreateSandboxResponse{Sandbox: toProto(sb), Created: created}, nil
}

func (s *service) GetSandbox(ctx context.Context, req *corralv1.GetSandboxRequest) (*corralv1.Sandbox, error) {
	sb, err := s.m.Get(ctx, req.GetName())
	if err != nil {
		return nil, toGRPC(err)
	}
	out := toProto(sb)
	out.Protections = s.m.Protections(ctx, sb)
	out.Network = s.m.Network(ctx, sb)
	return out, nil
}

func (s *service) UpdateSandbox(ctx context.Context, req *corralv1.UpdateSandboxRequest) (*corralv1.Sandbox, error) {
	sb, err := s.m.UpdatePolicy(ctx, req.GetName(), req.GetPolicy())
	if err != nil {
		return nil, toGRPC(err)
	}
	return toProto(sb), nil
}

// listReplyBytes bounds a ListSandboxes reply: under the 4 MiB a gRPC
// client receives by default, whatever the sandboxes' policies and labels.
const listReplyBytes = 3 << 20

func (s *service) ListSandboxes(ctx context.Context, req *corralv1.ListSandboxesRequest) (*corralv1.ListSandboxesResponse, error) {
	page, err := s.m.ListPage(ctx, lifecycle.ListOptions{Labels: req.GetLabels(), Phase: sandbox.Phase(req.GetPhase()),
		Limit: int(req.GetLimit()), After: req.GetPageToken()})
	if err != nil {
		return nil, toGRPC(err)
	}
	resp := &corralv1.ListSandboxesResponse{NextPageToken: page.Next}
	size := 0
	for i, sb := range page.Sandboxes {
		p := toProto(sb)
		n := proto.Size(p) + 8 // the field's tag and length
		if size+n > listReplyBytes && i > 0 {
			resp.NextPageToken = lifecycle.PageToken(page.Sandboxes[i-1])
			break
		}
		size += n
		resp.Sandboxes = append(resp.Sandboxes, p)
	}
	return resp, nil
}

func (s *service) StopSandbox(ctx context.Context, req *corralv1.StopSandboxRequest) (*corralv1.Sandbox, error) {
	sb, err := s.m.Stop(ctx, req.GetName())
	if err != nil {
		return nil, toGRPC(err)
	}
	return toProto(sb), nil
}

func (s *service) StartSandbox(ctx context.Context, req *corralv1.StartSandboxRequest) (*corralv1.Sandbox, error) {
	sb, err := s.m.Start(ctx, req.GetName())
	if err != nil {
		return nil, toGRPC(err)
	}
	return toProto(sb), nil
}

func (s *service) PauseSandbox(ctx context.Context, req *corralv1.PauseSandboxRequest) (*corralv1.Sandbox, error) {
	sb, err := s.m.Pause(ctx, req.GetName(), req.GetMemory())
	if err != nil {
		return nil, toGRPC(err)
	}
	return toProto(sb), nil
}

func (s *service) ResumeSandbox(ctx context.Context, req *corralv1.ResumeSandboxRequest) (*corralv1.Sandbox, error) {
	sb, err := s.m.Resume(ctx, req.GetName())
	if err != nil {
		return nil, toGRPC(err)
	}
	return toProto(sb), nil
}

func (s *service) DeleteSandbox(ctx context.Context, req *corralv1.DeleteSandboxRequest) (*corralv1.DeleteSandboxResponse, error) {
	if req.GetAssumeGone() {
		sb, err := s.m.AssumeGone(ctx, req.GetName(), req.GetForce(), req.GetReason())
		if err != nil {
			return nil, toGRPC(err)
		}
		return &corralv1.DeleteSandboxResponse{Sandbox: toProto(sb)}, nil
	}
	sb, err := s.m.Delete(ctx, req.GetName(), req.GetForce())
	if err != nil {
		return nil, toGRPC(err)
	}
	return &corralv1.DeleteSandboxResponse{Sandbox: toProto(sb)}, nil
}

func (s *service) Doctor(ctx context.Context, _ *corralv1.DoctorRequest) (*corralv1.DoctorReport, error) {
	findings, err := s.m.Doctor(ctx)
	if err != nil {
		return nil, toGRPC(err)
	}
	report := &corralv1.DoctorReport{}
	for _, f := range findings {
		report.Findings = append(report.Findings, &corralv1.DoctorFinding{Sandbox: f.Sandbox, Problem: f.Problem, Action: f.Action})
	}
	for _, t := range s.m.Tiers(ctx) {
		report.Tiers = append(report.Tiers, &corralv1.IsolationTier{Name: t.Name, Available: t.Available, Detail: t.Detail})
	}
	replicas, err := s.ListReplicas(ctx, &corralv1.ListReplicasRequest{})
	if err != nil {
		return nil, err
	}
	report.Replicas = replicas.Replicas
	stats, err := s.m.Stats()
	if err != nil {
		return nil, toGRPC(err)
	}
	report.Stats = &corralv1.GatewayStats{Operations: stats.Operations, Egress: stats.Egress}
	for _, c := range stats.DriverCalls {
		report.Stats.DriverCalls = append(report.Stats.DriverCalls, &corralv1.DriverCallStats{Kind: c.Kind, Count: c.Count, P50Seconds: c.P50, P95Seconds: c.P95})
	}
	return report, nil
}

func (s *service) ListReplicas(ctx context.Context, _ *corralv1.ListReplicasRequest) (*corralv1.ListReplicasResponse, error) {
	if s.replicas == nil {
		return nil, status.Error(codes.Unimplemented, "this gateway lists no replicas")
	}
	list, ttl, err := s.replicas.Replicas(ctx)
	if err != nil {
		return nil, toGRPC(err)
	}
	resp := &corralv1.ListReplicasResponse{LeaseTtl: durationpb.New(ttl)}
	now := time.Now()
	for _, r := range list {
		p := &corralv1.Replica{Id: r.ID, Pid: int64(r.PID), Host: r.Host, Home: r.Home, Listen: r.Listen,
			StartedAt: ts(r.StartedAt), SeenAt: ts(r.SeenAt), Alive: now.Sub(r.SeenAt) < ttl,
			Leader: r.Leader, Epoch: r.Epoch, Sandboxes: int64(r.Sandboxes)}
		if r.Leader {
			p.LeaseSince = ts(r.Since)
		}
		resp.Replicas = append(resp.Replicas, p)
	}
	return resp, nil
}

func (s *service) ListOperations(ctx context.Context, req *corralv1.ListOperationsRequest) (*corralv1.ListOperationsResponse, error) {
	ops, err := s.m.Operations(ctx, req.GetName())
	if err != nil {
		return nil, toGRPC(err)
	}
	resp := &corralv1.ListOperationsResponse{}
	for _, op := range ops {
		resp.Operations = append(resp.Operations, opToProto(op))
	}
	return resp, nil
}

func (s *service) WatchSandboxes(req *corralv1.WatchSandboxesRequest, stream corralv1.SandboxService_WatchSandboxesServer) error {
	ctx, cancel := context.WithCancel(stream.Context()) // a failed send ends the watch
	defer cancel()
	events, err := s.m.WatchSandboxes(ctx, req.GetName())
	if err != nil {
		return toGRPC(err)
	}
	for ev := range events {
		out := &corralv1.SandboxEvent{Type: string(ev.Type)}
		if ev.Sandbox != nil {
			out.Sandbox = toProto(ev.Sandbox)
		}
		if err := stream.Send(out); err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	return status.Error(codes.Unavailable, "watch ended: the gateway is shutting down or this watcher fell behind; watch again")
}

func (s *service) WaitSandbox(req *corralv1.WaitSandboxRequest, stream corralv1.SandboxService_WaitSandboxServer) error {
	var sendErr error
	sb, err := s.m.Wait(stream.Context(), req.GetName(), lifecycle.Goal(req.GetGoal()), req.GetSinceRevision(), func(sb *sandbox.Sandbox) {
		if sendErr == nil {
			sendErr = stream.Send(&corralv1.SandboxEvent{Type: "PROGRESS", Sandbox: toProto(sb)})
		}
	})
	switch {
	case sendErr != nil:
		return sendErr
	case err != nil:
		return toGRPC(err)
	}
	out := &corralv1.SandboxEvent{Type: "REACHED"}
	if sb != nil {
		out.Sandbox = toProto(sb)
	}
	return stream.Send(out)
}
