package snapshots

import (
	"archive/tar"
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/atomicfile"
	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/files"
)

// Content is the content-addressed store of snapshots' files under one
// directory: each file's contents is a blob named by its SHA-256 (files
// alike in any snapshots are kept once), and a snapshot is a manifest blob
// that lists its entries (names, types, modes, times, link targets, the
// digests of their contents). A blob is written in dir/tmp and renamed
// into place; the file system is synced before a manifest is returned, so
// a manifest a record names survives a crash of the machine with every
// blob it lists. Blobs are checked against their digest when read.
type Content struct {
	dir string
	// keepFree is what a snapshot leaves free on the store's file system
	// (which the gateway's store shares): a write that would go under it
	// is refused (DefaultKeepFree when 0).
	keepFree func(size uint64) uint64
	// gc is held shared (Hold) while blobs are written that no record
	// names yet, and alone while unnamed blobs are removed (Collect).
	gc sync.RWMutex
}

// collectPoll is how often Collect looks whether the store is free.
const collectPoll = 200 * time.Millisecond

// Hold keeps Collect from running until release is called. Whoever writes
// blobs, or reads a manifest to name it in a new record, holds it until
// the record that names the manifest is written.
func (c *Content) Hold() (release func()) {
	c.gc.RLock()
	return c.gc.RUnlock
}

// Stats is what a snapshot's files hold.
type Stats struct {
	Files int64 // entries: files, directories and links
	Bytes int64 // of regular files
}

// entry is one line of a manifest.
type entry struct {
	Name   string `json:"name"`
	Type   string `json:"type"` // file, dir, symlink, link
	Mode   int64  `json:"mode"`
	MTime  int64  `json:"mtime"` // Unix nanoseconds
	Size   int64  `json:"size,omitempty"`
	Digest string `json:"digest,omitempty"`
	Link   string `json:"link,omitempty"` // a symlink's target, a hard link's first name
}

// manifestHeader is a manifest's first line.
type manifestHeader struct {
	Version int   `json:"version"`
	Files   int64 `json:"files"`
	Bytes   int64 `json:"bytes"`
}

const manifestVersion = 1

// OpenContent opens (making it if need be) the content store in dir, and
// removes what an earlier process left half written.
func OpenContent(dir string) (*Content, error) {
	c := &Content{dir: dir}
	if err := os.RemoveAll(c.tmp()); err != nil {
		return nil, err
	}
	for _, d := range []string{c.tmp(), filepath.Join(dir, "sha256")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func (c *Content) tmp() string { return filepath.Join(c.dir, "tmp") }

// path is the file of a blob, "" for a malformed digest.
func (c *Content) path(digest string) string {
	hexd, ok := strings.CutPrefix(digest, "sha256:")
	if !ok || len(hexd) != 64 {
		return ""
	}
	if _, err := hex.DecodeString(hexd); err != nil {
		return ""
	}
	return filepath.Join(c.dir, "sha256", hexd[:2], hexd)
}

// DefaultKeepFree is what snapshots leave free on a file system of size
// bytes: 5% of it, at least 1 GiB.
func DefaultKeepFree(size uint64) uint64 { return max(size/20, 1<<30) }

// checkEvery is how many bytes a blob's write goes between looks at the
// free space.
const checkEvery = 32 << 20

// room refuses a write when the store's file system has less free than it
// keeps free.
func (c *Content) room() error {
	var st unix.Statfs_t
	if err := unix.Statfs(c.dir, &st); err != nil {
		return err
	}
	keepFree := c.keepFree
	if keepFree == nil {
		keepFree = DefaultKeepFree
	}
	keep := keepFree(st.Blocks * uint64(st.Bsize))
	if free := st.Bavail * uint64(st.Bsize); free < keep {
		return errdefs.ResourceExhausted("the snapshot store's disk (%s) has %d MiB free, under the %d MiB snapshots leave free: the snapshot is not taken",
			c.dir, free>>20, keep>>20)
	}
	return nil
}

// roomWriter is a blob's file that looks at the free space as it grows.
type roomWriter struct {
	c       *Content
	f       *os.File
	pending int64 // written since the last look
}

func (w *roomWriter) Write(p []byte) (int, error) {
	if w.pending += int64(len(p)); w.pending >= checkEvery {
		w.pending = 0
		if err := w.c.room(); err != nil {
			return 0, err
		}
	}
	return w.f.Write(p)
}

// put writes r as a blob and returns its digest and size. The caller
// holds the store (Hold). It refuses to fill the disk (room).
func (c *Content) put(r io.Reader) (string, int64, error) {
	if err := c.room(); err != nil {
		return "", 0, err
	}
	f, err := os.CreateTemp(c.tmp(), "blob-")
	if err != nil {
		return "", 0, err
	}
	defer os.Remove(f.Name()) // after the rename, nothing
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(&roomWriter{c: c, f: f}, h), r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", 0, err
	}
	digest := "sha256:" + hex.EncodeToString(h.Sum(nil))
	p := c.path(digest)
	if _, err := os.Stat(p); err == nil {
		return digest, n, nil // kept already
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return "", 0, err
	}
	return digest, n, os.Rename(f.Name(), p)
}

// PutFile stores the file at path as one blob and returns its digest and
// size. The caller holds the store (Hold). It is durable once a Capture
// after it returns (one syncfs for every blob written so far).
func (c *Content) PutFile(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	return c.put(f)
}

// OpenBlob opens one blob (a memory image), checked against its digest
// as it is read.
func (c *Content) OpenBlob(digest string) (io.ReadCloser, error) { return c.open(digest) }

// open opens a blob, reading it checked against its digest: a blob that
// changed on disk is an error at its end.
func (c *Content) open(digest string) (io.ReadCloser, error) {
	p := c.path(digest)
	if p == "" {
		return nil, fmt.Errorf("snapshot content: malformed digest %q", digest)
	}
	f, err := os.Open(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil, errdefs.NotFound("snapshot content: blob %s is missing", digest)
	}
	if err != nil {
		return nil, err
	}
	return &verified{f: f, h: sha256.New(), want: digest}, nil
}

// verified reads a blob and fails at its end when it does not hash to its
// name.
type verified struct {
	f    *os.File
	h    hash.Hash
	want string
}

func (v *verified) Read(p []byte) (int, error) {
	n, err := v.f.Read(p)
	v.h.Write(p[:n])
	if err == io.EOF {
		if got := "sha256:" + hex.EncodeToString(v.h.Sum(nil)); got != v.want {
			return n, fmt.Errorf("snapshot content: blob %s is damaged (it hashes to %s)", v.want, got)
		}
	}
	return n, err
}

func (v *verified) Close() error { return v.f.Close() }

// Capture stores what dir of root holds (the sandbox's /sandbox, seen from
// the host through an os.Root: nothing outside it is reached) and returns
// its manifest's digest. The caller holds the store (Hold). Device nodes, fifos and sockets are left out, as
// a copy out leaves them.
func (c *Content) Capture(ctx context.Context, root *os.Root) (string, Stats, error) {
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(files.Pack(pw, root, ".", "")) }()
	digest, st, err := c.ingest(ctx, pr)
	pr.CloseWithError(errors.New("capture ended"))
	return digest, st, err
}

// ingest stores the entries of a tar stream (a tree packed by files.Pack)
// and returns the manifest's digest.
func (c *Content) ingest(ctx context.Context, r io.Reader) (string, Stats, error) {
	list, err := os.CreateTemp(c.tmp(), "entries-")
	if err != nil {
		return "", Stats{}, err
	}
	defer os.Remove(list.Name())
	defer list.Close()
	bw := bufio.NewWriter(list)
	enc := json.NewEncoder(bw)
	var st Stats
	tr := tar.NewReader(r)
	for {
		if err := ctx.Err(); err != nil {
			return "", Stats{}, err
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return "", Stats{}, err
		}
		e := entry{Name: strings.TrimSuffix(hdr.Name, "/"), Mode: hdr.Mode & 0o7777, MTime: hdr.ModTime.UnixNano()}
		switch hdr.Typeflag {
		case tar.TypeDir:
			e.Type = "dir"
		case tar.TypeSymlink:
			e.Type, e.Link = "symlink", hdr.Linkname
		case tar.TypeLink:
			e.Type, e.Link = "link", hdr.Linkname
		case tar.TypeReg:
			e.Type = "file"
			if e.Digest, e.Size, err = c.put(tr); err != nil {
				return "", Stats{}, err
			}
			st.Bytes += e.Size
		default:
			continue
		}
		st.Files++
		if err := enc.Encode(e); err != nil {
			return "", Stats{}, err
		}
	}
	if err := bw.Flush(); err != nil {
		return "", Stats{}, err
	}
	if _, err := list.Seek(0, io.SeekStart); err != nil {
		return "", Stats{}, err
	}
	head, err := json.Marshal(manifestHeader{Version: manifestVersion, Files: st.Files, Bytes: st.Bytes})
	if err != nil {
		return "", Stats{}, err
	}
	digest, _, err := c.put(io.MultiReader(strings.NewReader(string(head)+"\n"), list))
	if err != nil {
		return "", Stats{}, err
	}
	return digest, st, atomicfile.SyncFS(c.dir) // every blob written so far, durable
}

// walk reads a manifest: its header, then each entry in order.
func (c *Content) walk(manifest string, fn func(e entry) error) (manifestHeader, error) {
	r, err := c.open(manifest)
	if err != nil {
		return manifestHeader{}, err
	}
	defer r.Close()
	dec := json.NewDecoder(bufio.NewReader(r))
	var head manifestHeader
	if err := dec.Decode(&head); err != nil {
		return head, fmt.Errorf("snapshot manifest %s: %w", manifest, err)
	}
	if head.Version != manifestVersion {
		return head, fmt.Errorf("snapshot manifest %s is of version %d; this gateway reads version %d", manifest, head.Version, manifestVersion)
	}
	for {
		var e entry
		err := dec.Decode(&e)
		if err == io.EOF {
			return head, nil
		}
		if err != nil {
			return head, fmt.Errorf("snapshot manifest %s: %w", manifest, err)
		}
		if err := fn(e); err != nil {
			return head, err
		}
	}
}

// WriteTar writes the files of a manifest as a tar stream, each name under
// prefix ("" or a directory name), for safetar to unpack into a sandbox's
// /sandbox or for an export.
func (c *Content) WriteTar(ctx context.Context, manifest string, w io.Writer) error {
	return c.writeTar(ctx, manifest, tar.NewWriter(w), "")
}

func (c *Content) writeTar(ctx context.Context, manifest string, tw *tar.Writer, prefix string) error {
	_, err := c.walk(manifest, func(e entry) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		hdr := &tar.Header{Name: prefix + e.Name, Mode: e.Mode, ModTime: time.Unix(0, e.MTime), Format: tar.FormatPAX}
		switch e.Type {
		case "dir":
			hdr.Typeflag, hdr.Name = tar.TypeDir, hdr.Name+"/"
		case "symlink":
			hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, e.Link
		case "link":
			hdr.Typeflag, hdr.Linkname = tar.TypeLink, prefix+e.Link
		case "file":
			hdr.Typeflag, hdr.Size = tar.TypeReg, e.Size
		default:
			return fmt.Errorf("snapshot manifest %s: entry %q of unknown type %q", manifest, e.Name, e.Type)
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if e.Type != "file" {
			return nil
		}
		r, err := c.open(e.Digest)
		if err != nil {
			return err
		}
		defer r.Close()
		n, err := io.Copy(tw, r)
		if err == nil && n != e.Size {
			err = fmt.Errorf("snapshot content: blob %s holds %d bytes, not %d", e.Digest, n, e.Size)
		}
		return err
	})
	if err != nil {
		return err
	}
	return tw.Flush()
}

// Collect removes every blob that no manifest keepers returns lists (nor
// is one of them, nor one of the blobs it returns: memory images), and
// returns how many it removed. It runs once no Hold is
// held, looking again every collectPoll until ctx ends: it never makes a
// Hold wait (a writer that waited would). keepers is asked once it holds
// the store alone.
func (c *Content) Collect(ctx context.Context, keepers func() (manifests, blobs []string, err error)) (int, error) {
	for !c.gc.TryLock() {
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(collectPoll):
		}
	}
	defer c.gc.Unlock()
	keep, blobs, err := keepers()
	if err != nil {
		return 0, err
	}
	live := map[string]bool{}
	for _, b := range blobs {
		live[b] = true
	}
	for _, m := range keep {
		if live[m] {
			continue
		}
		live[m] = true
		if _, err := c.walk(m, func(e entry) error {
			if e.Digest != "" {
				live[e.Digest] = true
			}
			return nil
		}); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			return 0, err // never remove what a manifest it cannot read might list
		}
	}
	removed := 0
	err = filepath.WalkDir(filepath.Join(c.dir, "sha256"), func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if !live["sha256:"+d.Name()] {
			if err := os.Remove(p); err != nil {
				return err
			}
			removed++
		}
		return nil
	})
	return removed, err
}
