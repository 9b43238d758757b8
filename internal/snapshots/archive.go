package snapshots

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"syscall"
	"time"

	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/safetar"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

// An exported snapshot is one tar archive: metaName, then the files of
// its /sandbox under filesDir.
const (
	metaName = "corral-snapshot.json"
	filesDir = "sandbox"
	// maxMeta bounds an imported archive's metadata.
	maxMeta = 1 << 20
)

// Meta is what an exported snapshot says of itself.
type Meta struct {
	Version    int          `json:"version"`
	Name       string       `json:"name"`
	SourceName string       `json:"source_name,omitempty"`
	Spec       sandbox.Spec `json:"spec"`
	CreatedAt  time.Time    `json:"created_at"`
	Files      int64        `json:"files"`
	Bytes      int64        `json:"bytes"`
}

// Export writes a snapshot's manifest as one archive a user can move.
func (c *Content) Export(ctx context.Context, w io.Writer, meta Meta, manifest string) error {
	meta.Version = manifestVersion
	data, err := json.MarshalIndent(meta, "", "  ")
	if err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	now := time.Now()
	if err := tw.WriteHeader(&tar.Header{Name: metaName, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(data)), ModTime: now}); err != nil {
		return err
	}
	if _, err := tw.Write(data); err != nil {
		return err
	}
	if err := tw.WriteHeader(&tar.Header{Name: filesDir + "/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: now}); err != nil {
		return err
	}
	if err := c.writeTar(ctx, manifest, tw, filesDir+"/"); err != nil {
		return err
	}
	return tw.Close()
}

// Import reads an exported archive and stores its files, returning what it
// says of itself and its manifest's digest. The caller holds the store
// (Hold). The archive is unpacked by safetar into a directory of the
// store's own first, so one that is hostile (names with "..", absolute
// names, entries written through a link that leads out, hard links to
// what it does not hold, devices) is refused with the entry and the reason,
// and nothing of it is kept.
func (c *Content) Import(ctx context.Context, r io.Reader) (Meta, string, Stats, error) {
	dir, err := os.MkdirTemp(c.tmp(), "import-")
	if err != nil {
		return Meta{}, "", Stats{}, err
	}
	defer os.RemoveAll(dir)
	root, err := os.OpenRoot(dir)
	if err != nil {
		return Meta{}, "", Stats{}, err
	}
	defer root.Close()
	if _, err := safetar.Unpack(r, root, safetar.Options{What: "the snapshot"}); err != nil {
		var refusal *safetar.Refusal
		if errors.As(err, &refusal) {
			return Meta{}, "", Stats{}, errdefs.InvalidArgument("the archive is refused: %v", refusal)
		}
		return Meta{}, "", Stats{}, errdefs.InvalidArgument("the archive cannot be read: %v", err)
	}
	top, err := os.ReadDir(dir)
	if err != nil {
		return Meta{}, "", Stats{}, err
	}
	for _, e := range top {
		if e.Name() != metaName && e.Name() != filesDir {
			return Meta{}, "", Stats{}, errdefs.InvalidArgument("the archive holds %q: a snapshot's archive holds only %s and %s/", e.Name(), metaName, filesDir)
		}
	}
	meta, err := readMeta(root)
	if err != nil {
		return Meta{}, "", Stats{}, err
	}
	if fi, err := root.Lstat(filesDir); err != nil || !fi.IsDir() {
		return Meta{}, "", Stats{}, errdefs.InvalidArgument("the archive has no %s/ directory: it is not an exported snapshot", filesDir)
	}
	sub, err := root.OpenRoot(filesDir)
	if err != nil {
		return Meta{}, "", Stats{}, err
	}
	defer sub.Close()
	manifest, st, err := c.Capture(ctx, sub)
	return meta, manifest, st, err
}

// readMeta reads and checks an imported archive's metadata.
func readMeta(root *os.Root) (Meta, error) {
	f, err := root.OpenFile(metaName, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if errors.Is(err, os.ErrNotExist) {
		return Meta{}, errdefs.InvalidArgument("the archive has no %s: it is not an exported snapshot", metaName)
	}
	if err != nil {
		return Meta{}, errdefs.InvalidArgument("the archive's %s: %v", metaName, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxMeta+1))
	if err != nil {
		return Meta{}, err
	}
	if len(data) > maxMeta {
		return Meta{}, errdefs.InvalidArgument("the archive's %s is over %d bytes", metaName, maxMeta)
	}
	var meta Meta
	if err := json.Unmarshal(data, &meta); err != nil {
		return Meta{}, errdefs.InvalidArgument("the archive's %s: %v", metaName, err)
	}
	if meta.Version != manifestVersion {
		return Meta{}, errdefs.InvalidArgument("the archive is a snapshot of version %d; this gateway reads version %d", meta.Version, manifestVersion)
	}
	return meta, nil
}
