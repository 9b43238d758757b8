package lifecycle

import (
	"context"
	"io"

	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/errdefs"
)

// seed puts the files of a snapshot's manifest in the /sandbox of the
// created incarnation of act, streamed from the snapshot store to the
// driver.
func (m *Manager) seed(ctx context.Context, act action) error {
	sd, ok := m.cfg.Driver.(driver.Seeder)
	if !ok || m.cfg.Seeds == nil {
		return errdefs.NotImplemented("the %s driver cannot restore snapshots", m.cfg.Driver.Name())
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(m.cfg.Seeds.WriteTar(ctx, act.seed, pw)) }()
	err := sd.Seed(ctx, act.ref, pr)
	pr.CloseWithError(io.ErrClosedPipe) // a driver that stopped reading ends the writer
	if err != nil || act.memory == "" {
		return err
	}
	cp, ok := m.cfg.Driver.(driver.Checkpointer)
	if !ok {
		return errdefs.NotImplemented("the %s driver cannot restore memory snapshots", m.cfg.Driver.Name())
	}
	image, err := m.cfg.Seeds.OpenBlob(act.memory)
	if err != nil {
		return err
	}
	defer image.Close()
	return cp.SeedMemory(ctx, act.ref, image)
}
