package images

import (
	"bufio"
	"bytes"
	"cmp"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/klauspost/compress/zstd"

	"github.com/corral-sandbox/corral/internal/atomicfile"
	"github.com/corral-sandbox/corral/internal/errdefs"
)

// How often a layer's byte count is reported: every this many bytes or
// this long, whichever comes first.
const (
	progressBytes = 1 << 20
	progressEvery = 100 * time.Millisecond
)

// meter counts and hashes the bytes of a blob as they are read, refuses to
// read past the declared size, and reports progress.
type meter struct {
	r     io.Reader
	n     int64
	limit int64 // declared size; -1 = none
	h     hash.Hash
	err   error // the first error it met; kept for the caller's reason

	report       func(n int64)
	lastN        int64
	lastReported time.Time
}

var errPastSize = errors.New("the blob is longer than its declared size")

func newMeter(r io.Reader, limit int64, report func(int64)) *meter {
	return &meter{r: r, limit: limit, h: sha256.New(), report: report, lastReported: time.Now()}
}

func (m *meter) Read(p []byte) (int, error) {
	if m.err != nil {
		return 0, m.err
	}
	if m.limit >= 0 && int64(len(p)) > m.limit-m.n+1 {
		p = p[:m.limit-m.n+1] // one byte more than allowed shows a lie
	}
	n, err := m.r.Read(p)
	m.h.Write(p[:n])
	m.n += int64(n)
	if m.limit >= 0 && m.n > m.limit {
		m.err = fmt.Errorf("%w (%d bytes)", errPastSize, m.limit)
		return n, m.err
	}
	if m.report != nil && (m.n-m.lastN >= progressBytes || time.Since(m.lastReported) >= progressEvery || err == io.EOF) {
		m.report(m.n)
		m.lastN, m.lastReported = m.n, time.Now()
	}
	if err != nil && err != io.EOF {
		m.err = err
	}
	return n, err
}

// digest is the sha256 of what was read.
func (m *meter) digest() v1.Hash {
	return v1.Hash{Algorithm: "sha256", Hex: fmt.Sprintf("%x", m.h.Sum(nil))}
}

// check compares what was read with what b declares, once all is read.
func (m *meter) check(b blob) error {
	if b.size >= 0 && m.n != b.size {
		return fmt.Errorf("the blob has %d bytes, its descriptor declares %d", m.n, b.size)
	}
	if b.digest.Hex != "" && m.digest() != b.digest {
		return fmt.Errorf("the blob's digest is %s, its descriptor declares %s", m.digest(), b.digest)
	}
	return nil
}

// decompress returns the tar stream of a blob as stored: gzip, zstd or
// plain, told by its first bytes.
func decompress(r io.Reader) (io.Reader, func(), error) {
	br := bufio.NewReader(r)
	magic, _ := br.Peek(4)
	switch {
	case bytes.HasPrefix(magic, []byte{0x1f, 0x8b}):
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, nil, fmt.Errorf("gzip: %w", err)
		}
		return zr, func() { zr.Close() }, nil
	case bytes.Equal(magic, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		zr, err := zstd.NewReader(br)
		if err != nil {
			return nil, nil, fmt.Errorf("zstd: %w", err)
		}
		return zr, zr.Close, nil
	}
	return br, func() {}, nil
}

// download copies a remote blob into dir/tmp, checked against its
// descriptor, and returns a blob that reads the copy.
func (s *Store) download(ctx context.Context, ref string, b blob, emit func(Progress)) (blob, func(), error) {
	file, release, err := s.tempPath("blob", false)
	if err != nil {
		return b, nil, err
	}
	fail := func(err error) (blob, func(), error) { release(); return b, nil, err }
	rc, err := b.open()
	if err != nil {
		return fail(errdefs.Unavailable("image %q: layer %s: download: %v", ref, b.name(), err))
	}
	defer rc.Close()
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return fail(err)
	}
	defer f.Close()
	m := newMeter(rc, b.size, func(n int64) {
		emit(Progress{Layer: b.diffID.String(), Status: "downloading", Current: n, Total: b.size})
	})
	emit(Progress{Layer: b.diffID.String(), Status: "downloading", Total: b.size})
	if _, err := io.Copy(f, readerCtx{ctx, m}); err != nil {
		if errors.Is(m.err, errPastSize) {
			return fail(errdefs.InvalidArgument("image %q: layer %s refused: %v", ref, b.name(), m.err))
		}
		if ctx.Err() != nil {
			return fail(ctx.Err())
		}
		return fail(errdefs.Unavailable("image %q: layer %s: download: %v", ref, b.name(), err))
	}
	if err := m.check(b); err != nil {
		return fail(errdefs.InvalidArgument("image %q: layer %s refused: %v", ref, b.name(), err))
	}
	local := b
	local.open = func() (io.ReadCloser, error) { return os.Open(file) }
	return local, release, nil
}

// readerCtx stops a copy once its context is done.
type readerCtx struct {
	ctx context.Context
	r   io.Reader
}

func (r readerCtx) Read(p []byte) (int, error) {
	if err := r.ctx.Err(); err != nil {
		return 0, err
	}
	return r.r.Read(p)
}

// unpack unpacks b into a new directory of dir/tmp, checks its bytes
// against every declaration (compressed size and digest when declared, the
// diff id always), and renames it into place. A layer that appeared in
// place meanwhile wins; the new copy is dropped.
func (s *Store) unpack(ctx context.Context, ref string, b blob, emit func(Progress)) error {
	refused := func(err error) error {
		return errdefs.InvalidArgument("image %q: layer %s refused: %v", ref, b.name(), err)
	}
	dir, release, err := s.tempPath("layer", true)
	if err != nil {
		return err
	}
	defer release()
	rc, err := b.open()
	if err != nil {
		return sourceErr(ref, "open layer "+b.name(), err)
	}
	defer rc.Close()
	s.unpacked.Add(1)
	total := max(b.size, 0) // 0: not declared
	emit(Progress{Layer: b.diffID.String(), Status: "unpacking", Total: total})
	m := newMeter(readerCtx{ctx, rc}, b.size, func(n int64) {
		emit(Progress{Layer: b.diffID.String(), Status: "unpacking", Current: n, Total: total})
	})
	var stream io.Reader = m
	if b.raw {
		zr, done, err := decompress(m)
		if err != nil {
			return refused(err)
		}
		defer done()
		stream = zr
	}
	diff := sha256.New()
	tee := io.TeeReader(stream, diff)
	lim := defaultLimits
	lim.Bytes = cmp.Or(b.unpacked, maxLayerBytes)
	stats, err := untar(tee, dir, lim, os.Geteuid() == 0)
	if err == nil {
		_, err = io.Copy(io.Discard, tee) // the diff id covers what follows the tar's end too
	}
	if err == nil && b.raw {
		_, err = io.Copy(io.Discard, m) // and the digest what follows the compressed stream
	}
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(m.err, errPastSize):
		return refused(m.err)
	case errors.Is(err, errNeedRoot):
		return errdefs.FailedPrecondition("image %q: layer %s: %v", ref, b.name(), err)
	case err != nil: // a *refusal, or a stream that is not a valid tar or gzip
		return refused(err)
	}
	if err := m.check(b); err != nil {
		return refused(err)
	}
	if got := (v1.Hash{Algorithm: "sha256", Hex: fmt.Sprintf("%x", diff.Sum(nil))}); got != b.diffID {
		return refused(fmt.Errorf("the uncompressed layer hashes to %s, the config declares diff id %s", got, b.diffID))
	}
	if stats.Skipped > 0 {
		slog.Debug("images: device nodes and fifos skipped", "ref", ref, "layer", b.name(), "count", stats.Skipped)
	}
	return s.place(dir, b.diffID.String(), stats.Bytes)
}

// place makes an unpacked, verified layer durable and renames it into
// place.
func (s *Store) place(dir, diffID string, size int64) error {
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	if err := atomicfile.SyncFS(dir); err != nil {
		return fmt.Errorf("image cache: sync layer %s: %w", diffID, err)
	}
	final := s.LayerPath(diffID)
	if err := os.Rename(dir, final); err != nil {
		if _, serr := os.Stat(final); serr == nil {
			return nil // another unpacking won; ours goes with dir/tmp
		}
		return fmt.Errorf("image cache: place layer %s: %w", diffID, err)
	}
	s.mu.Lock()
	s.sizes[diffID] = size
	s.mu.Unlock()
	return atomicfile.SyncDir(filepath.Dir(final))
}
