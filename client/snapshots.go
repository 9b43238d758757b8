package client

import (
	"context"
	"io"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
)

// Snapshot is a snapshot's record.
type Snapshot = corralv1.Snapshot

// Snapshot takes a snapshot of a sandbox's /sandbox as name (the sandbox
// is paused for the instant of the copy when it runs) and returns it once
// it is ready.
func (c *Client) Snapshot(ctx context.Context, sandbox, name string, memory bool) (*Snapshot, error) {
	s, err := c.Snapshots.CreateSnapshot(ctx, &corralv1.CreateSnapshotRequest{Sandbox: sandbox, Name: name, Memory: memory})
	return s, c.Explain(err)
}

// GetSnapshot returns a snapshot by name or id.
func (c *Client) GetSnapshot(ctx context.Context, name string) (*Snapshot, error) {
	s, err := c.Snapshots.GetSnapshot(ctx, &corralv1.GetSnapshotRequest{Name: name})
	return s, c.Explain(err)
}

// ListSnapshots returns the snapshots, oldest first.
func (c *Client) ListSnapshots(ctx context.Context) ([]*Snapshot, error) {
	resp, err := c.Snapshots.ListSnapshots(ctx, &corralv1.ListSnapshotsRequest{})
	return resp.GetSnapshots(), c.Explain(err)
}

// DeleteSnapshot removes a snapshot.
func (c *Client) DeleteSnapshot(ctx context.Context, name string) (*Snapshot, error) {
	s, err := c.Snapshots.DeleteSnapshot(ctx, &corralv1.DeleteSnapshotRequest{Name: name})
	return s, c.Explain(err)
}

// ExportSnapshot writes a snapshot to w as one archive.
func (c *Client) ExportSnapshot(ctx context.Context, name string, w io.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.Snapshots.ExportSnapshot(ctx, &corralv1.ExportSnapshotRequest{Name: name})
	if err != nil {
		return c.Explain(err)
	}
	for {
		msg, err := stream.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return c.Explain(err)
		}
		if _, err := w.Write(msg.GetData()); err != nil {
			return err
		}
	}
}

// ImportSnapshot reads an exported archive from r into a snapshot named
// name ("": the name the archive gives).
func (c *Client) ImportSnapshot(ctx context.Context, name string, r io.Reader) (*Snapshot, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.Snapshots.ImportSnapshot(ctx)
	if err != nil {
		return nil, c.Explain(err)
	}
	err = send(r, func() error { return stream.Send(&corralv1.ImportSnapshotRequest{Name: name}) }, func(p []byte) error {
		return stream.Send(&corralv1.ImportSnapshotRequest{Data: p})
	})
	if err != nil {
		return nil, err // the call is cancelled
	}
	s, err := stream.CloseAndRecv()
	return s, c.Explain(err)
}

// ForkOptions tune Fork.
type ForkOptions struct {
	// NamePrefix names the forks PREFIX-1 … PREFIX-N ("": the sandbox's
	// name and "-fork").
	NamePrefix string
	// Labels, when set, are the forks' labels instead of the sandbox's.
	Labels map[string]string
	// Detach returns once they are recorded, without waiting until they
	// run.
	Detach bool
}

// Fork makes count sandboxes from a snapshot of a sandbox, in parallel,
// and, unless detach, waits until each runs.
func (c *Client) Fork(ctx context.Context, sandbox string, count int, opts ForkOptions) ([]*Sandbox, error) {
	resp, err := c.Snapshots.ForkSandbox(ctx, &corralv1.ForkSandboxRequest{Sandbox: sandbox, Count: int32(count), NamePrefix: opts.NamePrefix,
		Labels: opts.Labels})
	if err != nil {
		return resp.GetSandboxes(), c.Explain(err)
	}
	forks := resp.GetSandboxes()
	if opts.Detach {
		return forks, nil
	}
	for i, sb := range forks {
		if forks[i], err = c.Wait(ctx, sb, Running, nil); err != nil {
			return forks, err
		}
	}
	return forks, nil
}
