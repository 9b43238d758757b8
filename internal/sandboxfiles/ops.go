package sandboxfiles

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"

	"github.com/corral-sandbox/corral/internal/files"
)

// The operations by name, as every front end offers them.

// Read writes the regular file path of a sandbox to w as it comes.
func (f *Files) Read(ctx context.Context, nameOrID, path string, w io.Writer) error {
	return f.Do(ctx, nameOrID, files.Request{Op: files.OpRead, Path: path}, nil, w)
}

// CopyOut writes a tar stream of path (a file, or a tree under its own
// name; DIR/. for what DIR holds) to w.
func (f *Files) CopyOut(ctx context.Context, nameOrID, path string, w io.Writer) error {
	return f.Do(ctx, nameOrID, files.Request{Op: files.OpCopyOut, Path: path}, nil, w)
}

// Write replaces path whole, atomically, with r's bytes and mode's
// permission bits (0: 0644), and describes it.
func (f *Files) Write(ctx context.Context, nameOrID, path string, mode uint32, r io.Reader) (*files.Info, error) {
	res, err := f.result(ctx, nameOrID, files.Request{Op: files.OpWrite, Path: path, Mode: mode}, r)
	return res.Info, err
}

// CopyIn unpacks the tar stream r into the directory dir (its top entry
// named base, when base is set and dir is not an existing directory) and
// returns the bytes of regular files written.
func (f *Files) CopyIn(ctx context.Context, nameOrID, dir, base string, r io.Reader) (int64, error) {
	res, err := f.result(ctx, nameOrID, files.Request{Op: files.OpCopyIn, Path: dir, Base: base}, r)
	return res.Written, err
}

// Stat describes path.
func (f *Files) Stat(ctx context.Context, nameOrID, path string) (*files.Info, error) {
	res, err := f.result(ctx, nameOrID, files.Request{Op: files.OpStat, Path: path}, nil)
	return res.Info, err
}

// List lists the directory path.
func (f *Files) List(ctx context.Context, nameOrID, path string) ([]files.Info, error) {
	res, err := f.result(ctx, nameOrID, files.Request{Op: files.OpList, Path: path}, nil)
	return res.Entries, err
}

// MkDir makes the directory path (with parents, the missing ones above
// it, as mkdir -p) with mode's permission bits (0: 0755), and describes it.
func (f *Files) MkDir(ctx context.Context, nameOrID, path string, parents bool, mode uint32) (*files.Info, error) {
	res, err := f.result(ctx, nameOrID, files.Request{Op: files.OpMkdir, Path: path, Parents: parents, Mode: mode}, nil)
	return res.Info, err
}

// Remove removes path: a file, an empty directory, or with recursive a
// tree.
func (f *Files) Remove(ctx context.Context, nameOrID, path string, recursive bool) error {
	return f.Do(ctx, nameOrID, files.Request{Op: files.OpRemove, Path: path, Recursive: recursive}, nil, io.Discard)
}

// result runs an operation whose output is a files.Result.
func (f *Files) result(ctx context.Context, nameOrID string, req files.Request, in io.Reader) (files.Result, error) {
	var out bytes.Buffer
	if err := f.Do(ctx, nameOrID, req, in, &out); err != nil {
		return files.Result{}, err
	}
	return files.ReadResult(&out)
}

// maxEventLine bounds one event of a watch, as it comes from the sandbox.
const maxEventLine = 64 << 10

// Watch calls event with each change in the directory path of a running
// sandbox (its first event is "ready", once the watch is set), until ctx
// ends (nil), event returns an error (that error), or the watch ends by
// itself (the reason of its last event, when it gives one).
func (f *Files) Watch(ctx context.Context, nameOrID, path string, event func(files.Event) error) error {
	r, w := io.Pipe()
	ended := make(chan error, 1)
	go func() {
		ended <- readEvents(r, event)
		r.Close() // the watch's next write fails: it ends
	}()
	err := f.Do(ctx, nameOrID, files.Request{Op: files.OpWatch, Path: path}, nil, w)
	w.Close()
	if evErr := <-ended; evErr != nil {
		return evErr
	}
	return err
}

// readEvents reads a watch's lines, one event each; empty lines are
// heartbeats.
func readEvents(r io.Reader, event func(files.Event) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4096), maxEventLine)
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 {
			continue
		}
		var ev files.Event
		if err := json.Unmarshal(line, &ev); err != nil {
			return errors.New("the watch sent a line that is not an event")
		}
		if err := event(ev); err != nil {
			return err
		}
	}
	if errors.Is(sc.Err(), bufio.ErrTooLong) {
		return errors.New("the watch sent a line of more than 64 KiB")
	}
	return sc.Err()
}
