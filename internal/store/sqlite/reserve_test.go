package sqlite

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/store"
	"github.com/corral-sandbox/corral/internal/store/storetest"
	"github.com/corral-sandbox/corral/internal/testenv"
)

// fillDisk writes a file into dir until its file system is full and
// returns the file.
func fillDisk(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 1<<20)
	for range 1 << 12 {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, unix.ENOSPC) {
				t.Fatal(err)
			}
			for _, small := range []int{64 << 10, 4 << 10, 512} { // the last blocks too
				for {
					if _, err := f.Write(chunk[:small]); err != nil {
						break
					}
				}
			}
			return path
		}
	}
	t.Fatal("the file system never filled")
	return ""
}

// On a full disk the writes that end sandboxes commit on the store's
// reserve, new sandboxes are refused with a clear error, and once space is
// freed the reserve comes back and creates work again.
func TestFullDiskStillDeletes(t *testing.T) {
	testenv.RequireRoot(t) // to mount a small file system
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=32m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	path := filepath.Join(dir, "corral.db")
	s := openStore(t, path)
	var ids []string
	for i := range 40 {
		sb := storetest.NewSandbox("sb"+string(rune('a'+i%26))+string(rune('a'+i/26)), storetest.T0)
		storetest.Create(t, s, sb)
		ids = append(ids, sb.ID)
	}
	raw := rawDB(t, path)
	if _, err := raw.Exec("PRAGMA wal_checkpoint(TRUNCATE)"); err != nil { // every write must grow the WAL now
		t.Fatal(err)
	}
	raw.Close()
	filler := fillDisk(t, dir)

	ctx := testCtx(t)
	for _, id := range ids {
		_, err := s.Mutate(ctx, id, func(sb *sandbox.Sandbox) (store.Mutation, error) {
			sb.Desired, sb.Phase = sandbox.DesiredDeleted, sandbox.PhaseDeleting
			return store.Mutation{Request: storetest.NewOp(id, sandbox.OpDelete, "me", storetest.T0)}, nil
		})
		if err != nil {
			t.Fatalf("a delete's intent on a full disk: %v", err)
		}
		storetest.Put(t, s, storetest.NewOp(id, sandbox.OpDriverDelete, "me", storetest.T0))
		if err := s.DeleteSandbox(ctx, id); err != nil {
			t.Fatalf("a delete on a full disk: %v", err)
		}
	}
	if _, err := os.Stat(path + ".reserve"); !os.IsNotExist(err) {
		t.Fatalf("the reserve after writes on a full disk: %v; want it freed for them", err)
	}
	_, _, err := s.CreateSandbox(ctx, storetest.NewSandbox("more", storetest.T0), storetest.NewOp("x", sandbox.OpCreate, "me", storetest.T0))
	if !errors.Is(err, errdefs.ErrResourceExhausted) || !strings.Contains(err.Error(), "is full") || !strings.Contains(err.Error(), dir) {
		t.Fatalf("a create on a full disk: %v; want resource exhausted naming the full disk", err)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	s.w.reserve.tried = time.Time{} // as if reserveRetry had passed
	sb := storetest.NewSandbox("after", storetest.T0)
	storetest.Create(t, s, sb)
	if fi, err := os.Stat(path + ".reserve"); err != nil || fi.Size() != ReserveBytes {
		t.Errorf("the reserve once space is back: %v, %v; want it allocated again", fi, err)
	}
}
