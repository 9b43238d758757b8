// Package safetar unpacks hostile tar streams through an os.Root: no entry
// reaches outside the destination directory, through "..", an absolute
// name or a symlink, without being refused with the reason. Image layers
// (overlayfs whiteouts) and copies into sandboxes both use it.
package safetar

import (
	"archive/tar"
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Limits bound what one archive may hold.
type Limits struct {
	Entries int   // tar entries
	PathLen int   // bytes of a name or link target
	Depth   int   // components of a name
	Bytes   int64 // of regular files in all; 0: no bound
}

// DefaultLimits are the limits of an image layer or a copy.
var DefaultLimits = Limits{Entries: 1 << 20, PathLen: 4096, Depth: 256}

// Refusal is an entry the unpacker will not write, and why.
type Refusal struct {
	Entry, Reason string
	// Err is the file system's error behind the reason, if any.
	Err error
}

// Unwrap is the file system's error behind the refusal.
func (r *Refusal) Unwrap() error { return r.Err }

func (r *Refusal) Error() string {
	entry := r.Entry
	if len(entry) > 200 {
		entry = entry[:200] + "…"
	}
	return fmt.Sprintf("entry %q: %s", entry, r.Reason)
}

// ErrNeedRoot is what a whiteout meets in a process that is not root.
var ErrNeedRoot = errors.New("the layer has whiteouts, which only root can make (overlay whiteouts are character devices): images need a gateway running as root")

// The overlayfs names of the OCI layer format.
const (
	whiteoutPrefix = ".wh."
	opaqueMarker   = ".wh..wh..opq"
	OpaqueXattr    = "trusted.overlay.opaque" // on an opaque directory of a layer
)

// Stats says what an unpacking did.
type Stats struct {
	Bytes   int64 // of regular files
	Skipped int   // device nodes and fifos, never created (layers only)
}

// Options say how a stream is unpacked.
type Options struct {
	Limits Limits
	// Layer: the stream is an OCI image layer, unpacked in overlayfs's
	// format: whiteouts are made (root only), device nodes and fifos
	// skipped. Otherwise ".wh." names are plain files, and a device node
	// or fifo is refused.
	Layer bool
	// Chown keeps the headers' owners (the process is root).
	Chown bool
	// Owner, when set and Chown is not, is given every entry made.
	Owner *Owner
	// Rename, when set, maps each cleaned name (and hard link target)
	// before anything is made of it.
	Rename func(name string) string
	// What names the destination in reasons; "" is "the layer".
	What string
}

// MkdirAll makes dir and its missing parents in root, as os.Root's
// MkdirAll, and gives each one it makes to owner, when set.
func MkdirAll(root *os.Root, dir string, mode os.FileMode, owner *Owner) error {
	if owner == nil {
		return root.MkdirAll(dir, mode)
	}
	made := ""
	for _, c := range strings.Split(path.Clean(dir), "/") {
		made = path.Join(made, c)
		err := root.Mkdir(made, mode)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			return err
		}
		if err := root.Lchown(made, owner.UID, owner.GID); err != nil {
			return err
		}
	}
	return nil
}

// copyBuffer is how much of a file's contents is written at once.
const copyBuffer = 256 << 10

// fill reads r into buf until it is full or r ends (io.EOF, with what it
// read); unlike io.ReadFull it passes on a stream's own io.ErrUnexpectedEOF
// (a tar entry cut short) as the error it is.
func fill(r io.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		k, err := r.Read(buf[n:])
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// zeroBlock is a block of zeros, to compare a file's blocks with.
var zeroBlock = make([]byte, copyBuffer)

// copySparse copies r into f a block of buf at a time, leaving a hole
// where a whole block is zeros (a sparse file stays sparse; tar streams
// carry holes as zeros), and returns how many bytes it copied.
func copySparse(f *os.File, r io.Reader, buf []byte) (int64, error) {
	var n int64
	hole := false // the last block was left a hole
	for {
		k, err := fill(r, buf)
		if k > 0 {
			if hole = bytes.Equal(buf[:k], zeroBlock[:k]); hole {
				_, werr := f.Seek(int64(k), io.SeekCurrent)
				err = cmp.Or(werr, err)
			} else if _, werr := f.Write(buf[:k]); werr != nil {
				return n, werr
			}
			n += int64(k)
		}
		switch {
		case err == nil:
		case err == io.EOF:
			if hole { // a hole at the end has no block after it to set the size
				return n, f.Truncate(n)
			}
			return n, nil
		default:
			return n, err
		}
	}
}

// Owner is a uid and gid.
type Owner struct{ UID, GID int }

// unpacker writes one tar stream into a directory through an os.Root: no
// entry can reach outside the directory, through ".." or a symlink,
// without being refused.
type unpacker struct {
	root   *os.Root
	lim    Limits
	opts   Options
	dirs   []string
	dirHdr map[string]*tar.Header // directories' metadata, set once all is written
	made   map[string]bool        // directories known to be there, until an entry replaces them
	buf    []byte                 // for the contents of files
	stats  Stats
}

// UnpackDir unpacks r into dir, which must exist (and be empty for a
// layer). An entry it refuses is a *Refusal; it stops at the first.
func UnpackDir(r io.Reader, dir string, opts Options) (Stats, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return Stats{}, err
	}
	defer root.Close()
	return Unpack(r, root, opts)
}

// Unpack unpacks r into root. An entry it refuses is a *Refusal; it stops
// at the first, and what it made before stays.
func Unpack(r io.Reader, root *os.Root, opts Options) (Stats, error) {
	lim := opts.Limits
	if lim == (Limits{}) {
		lim = DefaultLimits
	}
	u := &unpacker{root: root, lim: lim, opts: opts, dirHdr: map[string]*tar.Header{}, made: map[string]bool{}}
	tr := tar.NewReader(r)
	for n := 1; ; n++ {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return u.stats, fmt.Errorf("read the tar stream: %w", err)
		}
		if n > lim.Entries {
			return u.stats, &Refusal{Entry: hdr.Name, Reason: fmt.Sprintf("the archive has more than %d entries", lim.Entries)}
		}
		if err := u.entry(hdr, tr); err != nil {
			return u.stats, err
		}
	}
	return u.stats, u.finishDirs()
}

// what names the destination in reasons.
func (u *unpacker) what() string {
	if u.opts.What != "" {
		return u.opts.What
	}
	return "the layer"
}

// clean checks a name (or a hard link's target) and returns it cleaned.
func (u *unpacker) clean(name string) (string, string) {
	switch {
	case name == "":
		return "", "empty name"
	case strings.IndexByte(name, 0) >= 0:
		return "", "the name has a NUL byte"
	case len(name) > u.lim.PathLen:
		return "", fmt.Sprintf("the name is %d bytes long, over the limit of %d", len(name), u.lim.PathLen)
	case strings.HasPrefix(name, "/"):
		return "", "an absolute name"
	}
	depth := 0
	for _, c := range strings.Split(name, "/") {
		switch c {
		case "..":
			return "", "the name has a \"..\" component"
		case "", ".":
		default:
			depth++
		}
	}
	if depth > u.lim.Depth {
		return "", fmt.Sprintf("the name is %d levels deep, over the limit of %d", depth, u.lim.Depth)
	}
	return path.Clean(name), ""
}

// fsReason turns an error of the os.Root into a reason.
func (u *unpacker) fsReason(what string, err error) string {
	var perr *os.PathError
	if errors.As(err, &perr) && (strings.Contains(perr.Err.Error(), "path escapes") || errors.Is(perr.Err, unix.ELOOP)) {
		return fmt.Sprintf("%s: the path goes through a symlink that leads outside %s (or loops)", what, u.what())
	}
	return fmt.Sprintf("%s: %v", what, err)
}

func (u *unpacker) entry(hdr *tar.Header, r io.Reader) error {
	name, why := u.clean(hdr.Name)
	if why == "" && u.opts.Rename != nil && name != "." {
		name, why = u.clean(u.opts.Rename(name))
	}
	if why != "" {
		return &Refusal{Entry: hdr.Name, Reason: why}
	}
	refuse := func(what string, err error) error {
		return &Refusal{Entry: hdr.Name, Reason: u.fsReason(what, err), Err: err}
	}
	parent, base := path.Dir(name), path.Base(name)
	if hdr.Typeflag == tar.TypeXGlobalHeader {
		return nil
	}
	if name == "." {
		if hdr.Typeflag != tar.TypeDir {
			return &Refusal{Entry: hdr.Name, Reason: "the root of the archive is not a directory"}
		}
		return nil // the destination keeps its owner and mode
	}
	if parent != "." && !u.made[parent] {
		if err := MkdirAll(u.root, parent, 0o755, u.opts.Owner); err != nil {
			return refuse("make its parent", err)
		}
		u.made[parent] = true
	}
	if u.opts.Layer && strings.HasPrefix(base, whiteoutPrefix) {
		return u.whiteout(hdr.Name, parent, base)
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		if err := u.clear(name, true); err != nil {
			return refuse("replace what was there", err)
		}
		if err := u.root.Mkdir(name, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
			return refuse("make the directory", err)
		}
		u.made[name] = true
		if _, seen := u.dirHdr[name]; !seen {
			u.dirs = append(u.dirs, name)
		}
		u.dirHdr[name] = hdr
		return nil
	case tar.TypeReg, tar.TypeRegA, tar.TypeGNUSparse:
		if err := u.clear(name, false); err != nil {
			return refuse("replace what was there", err)
		}
		f, err := u.root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return refuse("create the file", err)
		}
		if u.buf == nil {
			u.buf = make([]byte, copyBuffer)
		}
		var src io.Reader = r
		if u.lim.Bytes > 0 {
			src = io.LimitReader(r, u.lim.Bytes-u.stats.Bytes+1) // one byte past the bound shows it
		}
		n, err := copySparse(f, src, u.buf)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err == nil && u.lim.Bytes > 0 && u.stats.Bytes+n > u.lim.Bytes {
			_ = u.root.Remove(name)
			return &Refusal{Entry: hdr.Name, Reason: fmt.Sprintf("the archive's files hold more than %d bytes in all", u.lim.Bytes)}
		}
		if err != nil {
			// No half-written file stays behind (on a full disk it would
			// keep the disk full): it is the one this entry just made.
			_ = u.root.Remove(name)
			return fmt.Errorf("entry %q: write: %w", hdr.Name, err)
		}
		u.stats.Bytes += n
	case tar.TypeSymlink:
		if hdr.Linkname == "" || len(hdr.Linkname) > u.lim.PathLen || strings.IndexByte(hdr.Linkname, 0) >= 0 {
			return &Refusal{Entry: hdr.Name, Reason: fmt.Sprintf("a symlink target of %d bytes (empty, NUL or over %d)", len(hdr.Linkname), u.lim.PathLen)}
		}
		if err := u.clear(name, false); err != nil {
			return refuse("replace what was there", err)
		}
		// The target is kept as written, absolute or not: it is resolved in
		// the sandbox's root at run time, never here.
		if err := u.root.Symlink(hdr.Linkname, name); err != nil {
			return refuse("make the symlink", err)
		}
	case tar.TypeLink:
		return u.hardLink(hdr, name)
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		if !u.opts.Layer {
			return &Refusal{Entry: hdr.Name, Reason: "a device node or fifo: never created"}
		}
		u.stats.Skipped++ // never created in the cache; a sandbox has its own /dev
		return nil
	default:
		return &Refusal{Entry: hdr.Name, Reason: fmt.Sprintf("unsupported entry type %q", hdr.Typeflag)}
	}
	if err := u.setMeta(name, hdr); err != nil {
		return refuse("set its owner, mode and times", err)
	}
	return nil
}

// hardLink links name to the entry the header names, which must already be
// in this layer.
func (u *unpacker) hardLink(hdr *tar.Header, name string) error {
	target, why := u.clean(hdr.Linkname)
	if why == "" && u.opts.Rename != nil {
		target, why = u.clean(u.opts.Rename(target))
	}
	if why != "" {
		return &Refusal{Entry: hdr.Name, Reason: "hard link target " + fmt.Sprintf("%q", hdr.Linkname) + ": " + why}
	}
	if target == name || target == "." {
		return &Refusal{Entry: hdr.Name, Reason: fmt.Sprintf("a hard link to %q", hdr.Linkname)}
	}
	fi, err := u.root.Lstat(target)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return &Refusal{Entry: hdr.Name, Reason: fmt.Sprintf("hard link target %q is not in %s (not before the link)", hdr.Linkname, u.what())}
	case err != nil:
		return &Refusal{Entry: hdr.Name, Reason: u.fsReason(fmt.Sprintf("hard link target %q", hdr.Linkname), err), Err: err}
	case fi.IsDir():
		return &Refusal{Entry: hdr.Name, Reason: fmt.Sprintf("hard link target %q is a directory", hdr.Linkname)}
	}
	if err := u.clear(name, false); err != nil {
		return &Refusal{Entry: hdr.Name, Reason: u.fsReason("replace what was there", err), Err: err}
	}
	if err := u.root.Link(target, name); err != nil {
		return &Refusal{Entry: hdr.Name, Reason: u.fsReason("make the hard link", err), Err: err}
	}
	return nil
}

// whiteout makes the overlay form of an OCI whiteout: ".wh.NAME" is a
// character device 0/0 named NAME, ".wh..wh..opq" the opaque xattr on its
// directory. Other ".wh..wh." names (aufs metadata) are skipped.
func (u *unpacker) whiteout(entry, parent, base string) error {
	if base != opaqueMarker && strings.HasPrefix(base, whiteoutPrefix+whiteoutPrefix) {
		return nil
	}
	if !u.opts.Chown {
		return ErrNeedRoot
	}
	d, err := u.root.OpenFile(parent, os.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return &Refusal{Entry: entry, Reason: u.fsReason("open its directory", err), Err: err}
	}
	defer d.Close()
	if base == opaqueMarker {
		if err := unix.Fsetxattr(int(d.Fd()), OpaqueXattr, []byte("y"), 0); err != nil {
			return fmt.Errorf("entry %q: mark the directory opaque: %w", entry, err)
		}
		return nil
	}
	hidden := strings.TrimPrefix(base, whiteoutPrefix)
	if hidden == "" || hidden == "." || hidden == ".." {
		return &Refusal{Entry: entry, Reason: "a whiteout of no name"}
	}
	if err := u.clear(path.Join(parent, hidden), false); err != nil {
		return &Refusal{Entry: entry, Reason: u.fsReason("replace what was there", err), Err: err}
	}
	if err := unix.Mknodat(int(d.Fd()), hidden, unix.S_IFCHR, 0); err != nil {
		return fmt.Errorf("entry %q: make the whiteout: %w", entry, err)
	}
	return nil
}

// clear removes what name is in the layer so far (a later entry replaces
// an earlier one), but keeps a directory when keepDir.
func (u *unpacker) clear(name string, keepDir bool) error {
	fi, err := u.root.Lstat(name)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if keepDir && fi.IsDir() {
		return nil
	}
	if fi.IsDir() && !u.opts.Layer {
		return errors.New("a directory is there: a copy does not replace a directory with a file")
	}
	if keepDir && !u.opts.Layer {
		return errors.New("a file is there: a copy does not replace a file with a directory")
	}
	for dir := range u.made {
		if dir == name || strings.HasPrefix(dir, name+"/") {
			delete(u.made, dir)
		}
	}
	return u.root.RemoveAll(name)
}

// setMeta gives name the header's owner (as root), mode and mtime. It acts
// on name in its parent directory's descriptor, never following name
// itself: only the unpacker writes the layer, so name is what it just made.
func (u *unpacker) setMeta(name string, hdr *tar.Header) error {
	d, err := u.root.OpenFile(path.Dir(name), os.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	defer d.Close()
	fd, base := int(d.Fd()), path.Base(name)
	switch {
	case u.opts.Chown:
		if err := unix.Fchownat(fd, base, hdr.Uid, hdr.Gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
	case u.opts.Owner != nil:
		if err := unix.Fchownat(fd, base, u.opts.Owner.UID, u.opts.Owner.GID, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
	}
	mask := int64(0o1777) // a copy never makes setuid or setgid files
	if u.opts.Layer {
		mask = 0o7777
	}
	if hdr.Typeflag != tar.TypeSymlink {
		// After the chown, which clears setuid and setgid bits.
		if err := unix.Fchmodat(fd, base, uint32(hdr.Mode&mask), 0); err != nil {
			return err
		}
	}
	atime := hdr.AccessTime
	if atime.IsZero() {
		atime = hdr.ModTime
	}
	ts := []unix.Timespec{timespec(atime), timespec(hdr.ModTime)}
	return unix.UtimesNanoAt(fd, base, ts, unix.AT_SYMLINK_NOFOLLOW)
}

func timespec(t time.Time) unix.Timespec {
	if t.IsZero() {
		t = time.Unix(0, 0)
	}
	return unix.NsecToTimespec(t.UnixNano())
}

// finishDirs sets the directories' metadata, deepest last-made first, once
// nothing more is written into them (a write would change the mtime, and a
// read-only mode would stop a non-root unpacker).
func (u *unpacker) finishDirs() error {
	for i := len(u.dirs) - 1; i >= 0; i-- {
		name := u.dirs[i]
		if fi, err := u.root.Lstat(name); err != nil || !fi.IsDir() {
			continue // replaced by a later entry
		}
		if err := u.setMeta(name, u.dirHdr[name]); err != nil {
			return &Refusal{Entry: name, Reason: u.fsReason("set its owner, mode and times", err), Err: err}
		}
	}
	return nil
}
