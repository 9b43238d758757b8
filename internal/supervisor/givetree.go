package supervisor

import (
	"errors"
	"io/fs"
	"os"
	"syscall"
)

// GiveTree gives dir (a sandbox's /sandbox) to uid and gid. When dir
// belonged to another user, what in it belonged to that user follows it
// (a tree a snapshot filled, all root's, or a run_as_user that changed);
// what others own stays theirs. The walk goes through an os.Root and
// changes links, never what they point to; dir itself changes last, so a
// walk cut short is made again at the next start.
func GiveTree(dir string, uid, gid int) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	fi, err := root.Lstat(".")
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return errors.New("give /sandbox: no owner to read")
	}
	if int(st.Uid) == uid && int(st.Gid) == gid {
		return nil
	}
	prev := st.Uid
	err = fs.WalkDir(root.FS(), ".", func(name string, _ fs.DirEntry, err error) error {
		if err != nil || name == "." {
			return err
		}
		fi, err := root.Lstat(name)
		if err != nil {
			return err
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid == prev {
			return root.Lchown(name, uid, gid)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return root.Lchown(".", uid, gid)
}
