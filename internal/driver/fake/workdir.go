package fake

import (
	"context"
	"io"
	"os"
	"path/filepath"

	"github.com/corral-sandbox/corral/internal/driver"
	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/safetar"
)

// workdirsDir is the directory of the state dir that keeps the fake
// sandboxes' /sandbox directories, made when first asked for.
const workdirsDir = "workdirs"

var (
	_ driver.Workdirs = (*Driver)(nil)
	_ driver.Seeder   = (*Driver)(nil)
)

func (d *Driver) workdir(id string) string { return filepath.Join(d.cfg.StateDir, workdirsDir, id) }

// Workdir implements driver.Workdirs: a directory of the state dir that
// stands for the sandbox's /sandbox, kept until it is deleted.
func (d *Driver) Workdir(ctx context.Context, id string) (string, error) {
	err := d.call(ctx, "workdir", id, "", func() error {
		if _, err := d.object(id); err != nil {
			return err
		}
		return os.MkdirAll(d.workdir(id), 0o755)
	})
	return d.workdir(id), err
}

// Seed implements driver.Seeder.
func (d *Driver) Seed(ctx context.Context, ref driver.Ref, r io.Reader) error {
	return d.call(ctx, "seed", ref.ID, "", func() error {
		o, err := d.object(ref.ID)
		if err != nil {
			return err
		}
		if o.Generation != ref.Generation {
			return errdefs.NotFound("no fake object for sandbox %s generation %d", ref.ID, ref.Generation)
		}
		if err := os.MkdirAll(d.workdir(ref.ID), 0o755); err != nil {
			return err
		}
		_, err = safetar.UnpackDir(r, d.workdir(ref.ID), safetar.Options{What: "the sandbox's /sandbox"})
		return err
	})
}

// removeWorkdir removes a deleted sandbox's /sandbox, if it had one.
func (d *Driver) removeWorkdir(id string) error { return os.RemoveAll(d.workdir(id)) }
