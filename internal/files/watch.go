package files

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strconv"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/errdefs"
)

// watchMask is what a watch reports: entries made, written, removed and
// moved in or out.
const watchMask = unix.IN_CREATE | unix.IN_MODIFY | unix.IN_CLOSE_WRITE | unix.IN_DELETE | unix.IN_MOVED_FROM |
	unix.IN_MOVED_TO | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR

// heartbeat is how often a watch with nothing to say writes an empty
// line, so it learns soon that its reader went away.
const heartbeat = 2 * time.Second

// watch writes the events of the directory rel, one JSON line each, in the
// order inotify saw them, until stdin ends, ctx ends or the directory goes.
func (f *FS) watch(ctx context.Context, p, rel string, stdin io.Reader, w io.Writer) error {
	d, err := f.Root.Open(rel)
	if err != nil {
		return Classify(p, err)
	}
	defer d.Close()
	if fi, err := d.Stat(); err != nil || !fi.IsDir() {
		return errdefs.FailedPrecondition("%s: not a directory: watch takes a directory", p)
	}
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return fmt.Errorf("inotify: %w", err)
	}
	in := os.NewFile(uintptr(fd), "inotify") // non-blocking: reads wait in the poller, Close ends them
	defer in.Close()
	// The directory already opened through the root, by its descriptor:
	// no path is resolved again.
	if _, err := unix.InotifyAddWatch(fd, "/proc/self/fd/"+strconv.Itoa(int(d.Fd())), watchMask); err != nil {
		return Classify(p, err)
	}
	var mu sync.Mutex // one writer of lines
	send := func(v any) error {
		mu.Lock()
		defer mu.Unlock()
		data, _ := json.Marshal(v)
		_, err := w.Write(append(data, '\n'))
		return err
	}
	stop := make(chan struct{})
	var once sync.Once
	end := func() { once.Do(func() { close(stop); in.Close() }) }
	go func() { // the reader's end is the watch's
		if stdin != nil {
			_, _ = io.Copy(io.Discard, stdin)
			end()
		}
	}()
	go func() {
		select {
		case <-ctx.Done():
			end()
		case <-stop:
		}
	}()
	go func() {
		t := time.NewTicker(heartbeat)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				mu.Lock()
				_, err := w.Write([]byte("\n"))
				mu.Unlock()
				if err != nil {
					end()
					return
				}
			}
		}
	}()
	if err := send(Event{Type: "ready", Path: path.Clean(p)}); err != nil { // the watch is in place
		return err
	}
	buf := make([]byte, 64<<10)
	for {
		n, err := in.Read(buf)
		if err != nil {
			select {
			case <-stop:
				return nil
			default:
			}
			if errors.Is(err, os.ErrClosed) {
				return nil
			}
			return fmt.Errorf("inotify: %w", err)
		}
		var last Event
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			nameBytes := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
			off += unix.SizeofInotifyEvent + int(ev.Len)
			name := string(nameBytes)
			for len(name) > 0 && name[len(name)-1] == 0 {
				name = name[:len(name)-1]
			}
			e, gone := eventOf(ev.Mask, path.Join(path.Clean(p), name))
			if gone {
				_ = send(Event{Type: "removed", Path: path.Clean(p), Dir: true, Error: "the watched directory was removed or moved"})
				return nil
			}
			if e.Type == "" || e == last && e.Type == "modified" { // one "modified" for a run of writes
				continue
			}
			last = e
			if err := send(e); err != nil {
				return nil // the reader went away
			}
		}
	}
}

// eventOf is the event of an inotify mask on name, and whether the watched
// directory itself went.
func eventOf(mask uint32, name string) (Event, bool) {
	dir := mask&unix.IN_ISDIR != 0
	switch {
	case mask&(unix.IN_DELETE_SELF|unix.IN_MOVE_SELF|unix.IN_IGNORED) != 0:
		return Event{}, true
	case mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0:
		return Event{Type: "created", Path: name, Dir: dir}, false
	case mask&(unix.IN_DELETE|unix.IN_MOVED_FROM) != 0:
		return Event{Type: "removed", Path: name, Dir: dir}, false
	case mask&(unix.IN_MODIFY|unix.IN_CLOSE_WRITE) != 0:
		return Event{Type: "modified", Path: name, Dir: dir}, false
	}
	return Event{}, false
}
