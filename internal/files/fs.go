package files

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"
	"syscall"

	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/safetar"
)

// FS is a sandbox's files, as seen through an os.Root: nothing outside
// Root is reached, through ".." or a symlink.
type FS struct {
	// Root is the directory that Prefix names in the sandbox: "/" in a
	// running sandbox, or its /sandbox directory on the host.
	Root   *os.Root
	Prefix string
	// Owner, when set, is given every file made (host side: the owner of
	// the sandbox's /sandbox); else files belong to whoever runs this.
	Owner *safetar.Owner
	// Writable and Readable, when set, tell whether the policy lets the
	// sandbox write or read a path; nil allows all (in a sandbox, Landlock
	// decides).
	Writable, Readable func(path string) bool
}

// rel is the name in Root of a sandbox path.
func (f *FS) rel(p string) (string, error) {
	if !strings.HasPrefix(p, "/") {
		return "", errdefs.InvalidArgument("%q: a path in a sandbox must be absolute", p)
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", errdefs.InvalidArgument("%q: the path has a NUL byte", p)
	}
	clean := path.Clean(p)
	prefix := path.Clean("/" + f.Prefix)
	if prefix == "/" {
		return strings.TrimPrefix(clean, "/") + map[bool]string{true: ".", false: ""}[clean == "/"], nil
	}
	if clean == prefix {
		return ".", nil
	}
	rest, ok := strings.CutPrefix(clean, prefix+"/")
	if !ok {
		return "", errdefs.FailedPrecondition("%s: the sandbox is not running, so only %s (kept across incarnations) can be reached", p, prefix)
	}
	return rest, nil
}

// checkWrite refuses a write the policy does not allow.
func (f *FS) checkWrite(p string) error {
	if f.Writable != nil && !f.Writable(path.Clean(p)) {
		return errdefs.PermissionDenied("%s: permission denied: the sandbox's policy (filesystem_policy) makes it read-only", p)
	}
	return nil
}

// checkRead refuses a read the policy does not allow.
func (f *FS) checkRead(p string) error {
	if f.Readable != nil && !f.Readable(path.Clean(p)) {
		return errdefs.PermissionDenied("%s: permission denied: the sandbox's policy (filesystem_policy) does not let it read there", p)
	}
	return nil
}

// Do runs req, reading its input from stdin and writing its output to
// stdout. Its errors name the path as the sandbox sees it.
func (f *FS) Do(ctx context.Context, req Request, stdin io.Reader, stdout io.Writer) error {
	rel, err := f.rel(req.Path)
	if err != nil {
		return err
	}
	switch req.Op {
	case OpCopyOut, OpRead, OpStat, OpList, OpWatch:
		if err := f.checkRead(req.Path); err != nil {
			return err
		}
	}
	switch req.Op {
	case OpCopyOut:
		top := path.Base(path.Clean(req.Path))
		if strings.HasSuffix(req.Path, "/.") || top == "/" {
			top = "" // what the directory holds, as docker cp's "DIR/."
		}
		return Classify(req.Path, Pack(stdout, f.Root, rel, top))
	case OpCopyIn:
		if err := f.checkWrite(req.Path); err != nil {
			return err
		}
		n, err := f.copyIn(req, rel, stdin)
		if err != nil {
			return Classify(req.Path, err)
		}
		return writeResult(stdout, Result{Written: n})
	case OpRead:
		return Classify(req.Path, f.read(rel, stdout))
	case OpWrite:
		if err := f.checkWrite(req.Path); err != nil {
			return err
		}
		info, err := f.write(req, rel, stdin)
		if err != nil {
			return Classify(req.Path, err)
		}
		return writeResult(stdout, Result{Info: info, Written: info.Size})
	case OpStat:
		fi, err := f.Root.Lstat(rel)
		if err != nil {
			return Classify(req.Path, err)
		}
		info := f.info(req.Path, rel, fi)
		return writeResult(stdout, Result{Info: &info})
	case OpList:
		entries, err := f.list(req.Path, rel)
		if err != nil {
			return Classify(req.Path, err)
		}
		return writeResult(stdout, Result{Entries: entries})
	case OpRemove:
		if err := f.checkWrite(req.Path); err != nil {
			return err
		}
		if rel == "." {
			return errdefs.InvalidArgument("%s: refusing to remove the root", req.Path)
		}
		if _, err := f.Root.Lstat(rel); err != nil {
			return Classify(req.Path, err)
		}
		if req.Recursive {
			err = f.Root.RemoveAll(rel)
		} else {
			err = f.Root.Remove(rel)
		}
		return Classify(req.Path, err)
	case OpMkdir:
		if err := f.checkWrite(req.Path); err != nil {
			return err
		}
		info, err := f.mkdir(req, rel)
		if err != nil {
			return Classify(req.Path, err)
		}
		return writeResult(stdout, Result{Info: info})
	case OpWatch:
		return f.watch(ctx, req.Path, rel, stdin, stdout)
	}
	return errdefs.InvalidArgument("unknown file operation %q", req.Op)
}

func writeResult(w io.Writer, r Result) error {
	return json.NewEncoder(w).Encode(r)
}

// ReadResult decodes what an operation printed.
func ReadResult(r io.Reader) (Result, error) {
	var res Result
	if err := json.NewDecoder(r).Decode(&res); err != nil {
		return res, fmt.Errorf("the file operation's result: %w", err)
	}
	return res, nil
}

// openRegular opens a regular file of the root for reading.
func openRegular(root *os.Root, rel string) (*os.File, error) {
	fi, err := root.Lstat(rel)
	if err != nil {
		return nil, err
	}
	if fi.IsDir() {
		return nil, &os.PathError{Op: "read", Path: rel, Err: syscall.EISDIR}
	}
	if !fi.Mode().IsRegular() {
		return nil, errdefs.FailedPrecondition("%s is not a regular file (%s)", rel, typeOf(fi))
	}
	return root.OpenFile(rel, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
}

func (f *FS) read(rel string, w io.Writer) error {
	file, err := openRegular(f.Root, rel)
	if err != nil {
		return err
	}
	defer file.Close()
	_, err = io.Copy(w, file)
	return err
}

// write replaces rel with what r holds: a temporary file beside it,
// fsync, then rename, so a reader sees the old content or the new.
func (f *FS) write(req Request, rel string, r io.Reader) (*Info, error) {
	if rel == "." {
		return nil, &os.PathError{Op: "write", Path: rel, Err: syscall.EISDIR}
	}
	if fi, err := f.Root.Lstat(rel); err == nil && fi.IsDir() {
		return nil, &os.PathError{Op: "write", Path: rel, Err: syscall.EISDIR}
	}
	mode := os.FileMode(req.Mode & 0o1777)
	if req.Mode == 0 {
		mode = 0o644
	}
	dir, base := path.Dir(rel), path.Base(rel)
	var tmp string
	var file *os.File
	for i := 0; ; i++ {
		tmp = path.Join(dir, fmt.Sprintf(".%s.corral-%d-%d", base, os.Getpid(), i))
		var err error
		file, err = f.Root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrExist) || i > 100 {
			return nil, err
		}
	}
	done := false
	defer func() {
		if !done {
			file.Close()
			_ = f.Root.Remove(tmp)
		}
	}()
	if _, err := io.Copy(file, r); err != nil {
		return nil, err
	}
	if err := file.Chmod(mode); err != nil {
		return nil, err
	}
	if o := f.Owner; o != nil {
		if err := file.Chown(o.UID, o.GID); err != nil {
			return nil, err
		}
	}
	if err := file.Sync(); err != nil {
		return nil, err
	}
	if err := file.Close(); err != nil {
		return nil, err
	}
	if err := f.Root.Rename(tmp, rel); err != nil {
		return nil, err
	}
	done = true
	fi, err := f.Root.Lstat(rel)
	if err != nil {
		return nil, err
	}
	info := f.info(req.Path, rel, fi)
	return &info, nil
}

func (f *FS) mkdir(req Request, rel string) (*Info, error) {
	mode := os.FileMode(req.Mode & 0o1777)
	if req.Mode == 0 {
		mode = 0o755
	}
	if req.Parents {
		if err := safetar.MkdirAll(f.Root, rel, mode, f.Owner); err != nil {
			return nil, err
		}
	} else {
		if err := f.Root.Mkdir(rel, mode); err != nil {
			return nil, err
		}
		if o := f.Owner; o != nil {
			if err := f.Root.Lchown(rel, o.UID, o.GID); err != nil {
				return nil, err
			}
		}
	}
	fi, err := f.Root.Lstat(rel)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return nil, &os.PathError{Op: "mkdir", Path: rel, Err: syscall.ENOTDIR}
	}
	info := f.info(req.Path, rel, fi)
	return &info, nil
}

func (f *FS) list(p, rel string) ([]Info, error) {
	fi, err := f.Root.Lstat(rel)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return nil, &os.PathError{Op: "list", Path: rel, Err: syscall.ENOTDIR}
	}
	d, err := f.Root.Open(rel)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	var out []Info
	for {
		ents, err := d.ReadDir(1024)
		for _, e := range ents {
			efi, ierr := e.Info()
			if ierr != nil {
				continue // removed meanwhile
			}
			out = append(out, f.info(path.Join(p, e.Name()), path.Join(rel, e.Name()), efi))
		}
		if err == io.EOF || len(ents) == 0 {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// info describes fi, a file at p in the sandbox and rel in the root.
func (f *FS) info(p, rel string, fi os.FileInfo) Info {
	info := Info{Name: path.Base(p), Path: path.Clean(p), Type: typeOf(fi), Size: fi.Size(),
		Mode: uint32(fi.Mode().Perm()), ModTime: fi.ModTime()}
	if fi.Mode()&os.ModeSticky != 0 {
		info.Mode |= 0o1000
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		info.UID, info.GID = int(st.Uid), int(st.Gid)
	}
	if info.Type == "symlink" {
		info.Link, _ = f.Root.Readlink(rel)
	}
	return info
}

func typeOf(fi os.FileInfo) string {
	switch m := fi.Mode(); {
	case m.IsRegular():
		return "file"
	case m.IsDir():
		return "dir"
	case m&os.ModeSymlink != 0:
		return "symlink"
	}
	return "other"
}

// Local opens the FS that req needs in this process's own root, as a
// sandbox's file operation does inside it: the kernel resolves the
// directory the operation works in (inside a sandbox, within its root,
// where ".." of / is /, and Landlock checks only that directory itself),
// and an os.Root of it resolves what lies below. That directory is the
// path itself when it is a directory and the operation reads or copies
// it, else its parent.
func Local(req Request) (*FS, error) {
	if !strings.HasPrefix(req.Path, "/") {
		return nil, errdefs.InvalidArgument("%q: a path in a sandbox must be absolute", req.Path)
	}
	p := path.Clean(req.Path)
	dir := path.Dir(p)
	switch {
	case req.Op == OpCopyIn || req.Op == OpCopyOut || req.Op == OpList || req.Op == OpStat || req.Op == OpWatch:
		if fi, err := os.Lstat(p); err == nil && fi.IsDir() {
			dir = p
		}
	case req.Op == OpMkdir && req.Parents:
		// mkdir -p: from the nearest directory that is there
		for dir != "/" {
			if _, err := os.Lstat(dir); err == nil {
				break
			}
			dir = path.Dir(dir)
		}
	}
	root, err := os.OpenRoot(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, errdefs.NotFound("%s: no such directory", dir)
	}
	if err != nil {
		return nil, Classify(dir, err)
	}
	return &FS{Root: root, Prefix: dir}, nil
}
