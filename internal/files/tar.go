package files

import (
	"archive/tar"
	"io"
	"os"
	"path"
	"sort"
	"strings"
	"syscall"

	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/safetar"
)

// Pack writes rel of root as a tar stream, as docker cp does: a file, a
// symlink (as a link) or a directory tree, with modes, owners and
// modification times; its top entry is named top, or, when top is "",
// what a directory holds is written without it; hard links are kept. Device nodes, fifos and
// sockets in a tree are left out; one asked for by name is an error, not an
// empty success. Memory stays constant whatever the sizes, and the work is
// linear in the tree's entries: each is reached from its directory, opened
// once. A tree deeper, or with longer names, than a copy into a sandbox
// takes (safetar.DefaultLimits) is refused when the walk reaches that far.
func Pack(w io.Writer, root *os.Root, rel, top string) error {
	if fi, err := root.Lstat(rel); err == nil && special(fi.Mode()) {
		return errdefs.InvalidArgument("%s is a device, fifo or socket: only files, links and directories are copied", rel)
	}
	p := &packer{tw: tar.NewWriter(w), links: map[[2]uint64]string{}}
	if err := p.entry(root, rel, top, 0); err != nil {
		return err
	}
	return p.tw.Close()
}

// packer writes one tree; a file with several links is written once, its
// other names as hard links to the first.
type packer struct {
	tw    *tar.Writer
	links map[[2]uint64]string // device and inode: the first name written
}

// entry writes rel of dir (one name, but at the top of the tree) as name,
// depth levels under the top.
func (p *packer) entry(dir *os.Root, rel, name string, depth int) error {
	tw, lim := p.tw, safetar.DefaultLimits
	switch {
	case depth > lim.Depth:
		return errdefs.InvalidArgument("%s: the tree is more than %d levels deep, more than a copy takes", name, lim.Depth)
	case len(name) > lim.PathLen:
		return errdefs.InvalidArgument("%s...: a name in the tree is longer than the %d bytes a copy takes", name[:64], lim.PathLen)
	}
	fi, err := dir.Lstat(rel)
	if err != nil {
		return err
	}
	link := ""
	switch {
	case fi.Mode()&os.ModeSymlink != 0:
		if link, err = dir.Readlink(rel); err != nil {
			return err
		}
	case special(fi.Mode()):
		return nil
	}
	if name != "" {
		hdr, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		hdr.Name = name
		if fi.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uname, hdr.Gname = "", ""
		hdr.Format = tar.FormatPAX // sub-second times, long names
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && fi.Mode().IsRegular() && st.Nlink > 1 {
			key := [2]uint64{uint64(st.Dev), st.Ino}
			if first, seen := p.links[key]; seen {
				hdr.Typeflag, hdr.Linkname, hdr.Size = tar.TypeLink, first, 0
				return tw.WriteHeader(hdr)
			}
			p.links[key] = name
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
	}
	switch {
	case fi.Mode().IsRegular():
		f, err := dir.OpenFile(rel, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		n, err := io.CopyN(tw, f, fi.Size())
		if err == io.EOF { // the file shrank meanwhile: the header said more
			_, err = io.CopyN(tw, zeros{}, fi.Size()-n)
		}
		return err
	case fi.IsDir():
		sub, err := dir.OpenRoot(rel)
		if err != nil {
			return err
		}
		defer sub.Close()
		d, err := sub.Open(".")
		if err != nil {
			return err
		}
		names, err := d.Readdirnames(-1)
		d.Close()
		if err != nil {
			return err
		}
		sort.Strings(names)
		for _, n := range names {
			if err := p.entry(sub, n, path.Join(name, n), depth+1); err != nil {
				return err
			}
		}
	}
	return nil
}

// special tells device nodes, fifos and sockets.
func special(m os.FileMode) bool {
	return m&(os.ModeDevice|os.ModeNamedPipe|os.ModeSocket|os.ModeCharDevice) != 0
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// copyIn unpacks a tar stream into rel as docker cp does: into rel when it
// is a directory; else, with a Base, as rel (its top entry renamed), in
// rel's parent, which must exist.
func (f *FS) copyIn(req Request, rel string, r io.Reader) (int64, error) {
	opts := safetar.Options{What: "the destination " + req.Path, Owner: f.Owner}
	dir := rel
	fi, err := f.Root.Stat(rel)
	switch {
	case err == nil && fi.IsDir():
	case req.Base == "" && err == nil:
		return 0, errdefs.FailedPrecondition("%s: not a directory: a tar stream is unpacked into a directory", req.Path)
	case req.Base == "" || strings.HasSuffix(req.Path, "/") && err != nil:
		return 0, errdefs.NotFound("%s: no such directory", req.Path)
	case err != nil && !os.IsNotExist(err):
		return 0, err
	default: // a file to replace, or a new name
		if rel == "." {
			return 0, errdefs.FailedPrecondition("%s: not a directory", req.Path)
		}
		dir = path.Dir(rel)
		parent := path.Dir(path.Clean(req.Path))
		pfi, err := f.Root.Stat(dir)
		if err != nil {
			if os.IsNotExist(err) {
				return 0, errdefs.NotFound("%s: no such directory (the parent of %s)", parent, req.Path)
			}
			return 0, Classify(parent, err)
		}
		if !pfi.IsDir() {
			return 0, errdefs.FailedPrecondition("%s: not a directory (the parent of %s)", parent, req.Path)
		}
		from, to := req.Base, path.Base(rel)
		opts.Rename = func(name string) string {
			if name == from {
				return to
			}
			if rest, ok := strings.CutPrefix(name, from+"/"); ok {
				return to + "/" + rest
			}
			return name
		}
	}
	sub, err := f.Root.OpenRoot(dir)
	if err != nil {
		return 0, err
	}
	defer sub.Close()
	stats, err := safetar.Unpack(r, sub, opts)
	return stats.Bytes, err
}
