package images

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/safetar"

	"github.com/corral-sandbox/corral/internal/errdefs"
)

// maxReadFile bounds what ReadFile returns.
const maxReadFile = 16 << 20

// maxHops bounds the symlinks one ReadFile follows, as the kernel does.
const maxHops = 40

// ReadFile returns the content of a file of img's merged tree, as the
// sandbox will see it: the top-most layer that has the path wins, overlay
// whiteouts hide what lies below, opaque directories hide the lower
// layers' content, and symlinks are followed inside the tree (an absolute
// one from the tree's root, ".." stopping at it), never out of it. A path
// that is missing is errdefs.ErrNotFound.
func (s *Store) ReadFile(img Image, name string) ([]byte, error) {
	m, err := s.merged(img)
	if err != nil {
		return nil, err
	}
	defer m.close()
	p, layer, fi, err := m.resolve(name)
	if err != nil {
		return nil, fmt.Errorf("image %s: %s: %w", img.ID, name, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, errdefs.InvalidArgument("image %s: %s is not a regular file", img.ID, name)
	}
	if fi.Size() > maxReadFile {
		return nil, errdefs.InvalidArgument("image %s: %s is %d bytes, over the %d ReadFile reads", img.ID, name, fi.Size(), maxReadFile)
	}
	f, err := m.roots[layer].OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, fmt.Errorf("image %s: %s: %w", img.ID, name, err)
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, maxReadFile))
}

// mergedTree is an image's layers, bottom first, each opened as an os.Root.
type mergedTree struct {
	roots []*os.Root
}

func (s *Store) merged(img Image) (*mergedTree, error) {
	m := &mergedTree{}
	for _, l := range img.Layers {
		r, err := os.OpenRoot(s.LayerPath(l))
		if err != nil {
			m.close()
			return nil, errdefs.NotFound("image %s: layer %s is not in the cache: %v", img.ID, l, err)
		}
		m.roots = append(m.roots, r)
	}
	return m, nil
}

func (m *mergedTree) close() {
	for _, r := range m.roots {
		r.Close()
	}
}

// resolve follows name through the merged tree to what it names: a path
// with no symlink in it, the layer that has it, and its info.
func (m *mergedTree) resolve(name string) (string, int, fs.FileInfo, error) {
	todo := strings.Split(name, "/")
	resolved := "."
	hops := 0
	for len(todo) > 0 {
		c := todo[0]
		todo = todo[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			resolved = path.Dir(resolved) // path.Dir(".") is "."
			continue
		}
		cand := path.Join(resolved, c)
		layer, fi, err := m.lookup(cand)
		if err != nil {
			return "", 0, nil, err
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			if hops++; hops > maxHops {
				return "", 0, nil, fmt.Errorf("more than %d symlinks: %w", maxHops, unix.ELOOP)
			}
			target, err := m.roots[layer].Readlink(cand)
			if err != nil {
				return "", 0, nil, err
			}
			if strings.HasPrefix(target, "/") {
				resolved = "."
			}
			todo = append(strings.Split(target, "/"), todo...)
			continue
		}
		if len(todo) > 0 && !fi.IsDir() && hasComponent(todo) {
			return "", 0, nil, fmt.Errorf("%s: %w", cand, unix.ENOTDIR)
		}
		resolved = cand
	}
	if resolved == "." {
		return "", 0, nil, errdefs.InvalidArgument("the tree's root is a directory")
	}
	layer, fi, err := m.lookup(resolved)
	return resolved, layer, fi, err
}

// hasComponent says whether a rest of a path still names something.
func hasComponent(parts []string) bool {
	for _, p := range parts {
		if p != "" && p != "." {
			return true
		}
	}
	return false
}

// lookup finds the top-most layer that has p, whose every parent is a
// directory of the merged tree (resolve sees to that). A whiteout of p or
// of a parent, a parent that is no directory in a layer, or an opaque
// parent stops the search down the layers.
func (m *mergedTree) lookup(p string) (int, fs.FileInfo, error) {
	parts := strings.Split(p, "/")
	for i := len(m.roots) - 1; i >= 0; i-- {
		cur, stop := ".", false
		for j, c := range parts {
			cur = path.Join(cur, c)
			fi, err := m.roots[i].Lstat(cur)
			if errors.Is(err, fs.ErrNotExist) {
				break // not in this layer: look lower, unless an opaque parent says no
			}
			if err != nil {
				return 0, nil, err
			}
			if isWhiteout(fi) {
				return 0, nil, errdefs.NotFound("%s: %w", p, fs.ErrNotExist)
			}
			if j == len(parts)-1 {
				return i, fi, nil
			}
			if !fi.IsDir() {
				return 0, nil, errdefs.NotFound("%s: %w", p, fs.ErrNotExist)
			}
			if m.opaque(i, cur) {
				stop = true
			}
		}
		if stop {
			break
		}
	}
	return 0, nil, errdefs.NotFound("%s: %w", p, fs.ErrNotExist)
}

// isWhiteout says whether fi is an overlay whiteout: a character device 0/0.
func isWhiteout(fi fs.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && fi.Mode()&fs.ModeCharDevice != 0 && st.Rdev == 0
}

// opaque says whether directory dir of layer i hides the layers below it.
func (m *mergedTree) opaque(i int, dir string) bool {
	d, err := m.roots[i].OpenFile(dir, os.O_RDONLY|unix.O_DIRECTORY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return false
	}
	defer d.Close()
	buf := make([]byte, 8)
	n, err := unix.Fgetxattr(int(d.Fd()), safetar.OpaqueXattr, buf)
	return err == nil && string(buf[:n]) == "y"
}
