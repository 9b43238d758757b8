package files

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/corral-sandbox/corral/internal/errdefs"
	"github.com/corral-sandbox/corral/internal/safetar"
)

// Command is the first word of a file operation's command line. The exec
// stage runs it itself, after applying the sandbox's policy, instead of
// looking for a program of that name.
const Command = "corral-files"

// The operations.
const (
	OpCopyOut = "copy-out" // Path as a tar stream on stdout
	OpCopyIn  = "copy-in"  // a tar stream on stdin into Path, as docker cp; Result{}
	OpRead    = "read"     // Path's bytes on stdout
	OpWrite   = "write"    // stdin into Path, atomically (a temporary file, then rename); Result{Info}
	OpList    = "list"     // Result{Entries}
	OpStat    = "stat"     // Result{Info}
	OpRemove  = "remove"   // Path (with Recursive, what it holds); Result{}
	OpMkdir   = "mkdir"    // Path (with Parents, its missing parents); Result{Info}
	OpWatch   = "watch"    // Events of the directory Path, one JSON line each, until stdin ends
)

// Request is one file operation.
type Request struct {
	Op   string `json:"op"`
	Path string `json:"path"` // absolute, in the sandbox
	// Base, for copy-in, is the name of the tar stream's top entry, which
	// becomes Path's last name when Path is not an existing directory; ""
	// unpacks the stream as it is into the directory Path.
	Base      string `json:"base,omitempty"`
	Recursive bool   `json:"recursive,omitempty"`
	Parents   bool   `json:"parents,omitempty"`
	Mode      uint32 `json:"mode,omitempty"` // permission bits of a write or mkdir; 0: 0644 or 0755
}

// Argv is the command line of req.
func Argv(req Request) []string {
	data, _ := json.Marshal(req) // plain fields always marshal
	return []string{Command, string(data)}
}

// ParseArgv is the request of a command line's arguments after Command.
func ParseArgv(args []string) (Request, error) {
	var req Request
	if len(args) != 1 {
		return req, errdefs.InvalidArgument("%s takes one JSON argument, got %d", Command, len(args))
	}
	if err := json.Unmarshal([]byte(args[0]), &req); err != nil {
		return req, errdefs.InvalidArgument("%s: %v", Command, err)
	}
	return req, nil
}

// Info describes one file.
type Info struct {
	Name    string    `json:"name"`
	Path    string    `json:"path"`
	Type    string    `json:"type"` // "file", "dir", "symlink" or "other"
	Size    int64     `json:"size"`
	Mode    uint32    `json:"mode"` // permission bits
	ModTime time.Time `json:"mtime"`
	Link    string    `json:"link,omitempty"` // a symlink's target
	UID     int       `json:"uid"`
	GID     int       `json:"gid"`
}

// Event is one change in a watched directory.
type Event struct {
	Type string `json:"type"` // "created", "modified" or "removed"
	Path string `json:"path"`
	Dir  bool   `json:"dir,omitempty"`
	// Error, on the last event of a watch that ends by itself, says why.
	Error string `json:"error,omitempty"`
}

// Result is what an operation that returns no stream prints on stdout.
type Result struct {
	Info    *Info  `json:"info,omitempty"`
	Entries []Info `json:"entries,omitempty"`
	Written int64  `json:"written,omitempty"` // bytes of regular files, for copy-in and write
}

// errPrefix starts the line on stderr that carries an operation's error.
const errPrefix = "corral-files-error: "

// wireError is an error as it crosses from the sandbox.
type wireError struct {
	Kind    string `json:"kind"`
	Message string `json:"message"`
}

// The kinds of error, each one of errdefs' classes.
const (
	kindNotFound   = "not_found"
	kindPrecond    = "failed_precondition"
	kindInvalid    = "invalid_argument"
	kindPermission = "permission_denied"
	kindNoSpace    = "no_space"
	kindOther      = "other"
)

// ErrLine is the line an operation that failed with err prints on stderr.
func ErrLine(err error) string {
	data, _ := json.Marshal(wireError{Kind: kindOf(err), Message: err.Error()})
	return errPrefix + string(data) + "\n"
}

// ParseErr is the error that an operation's stderr reports, or nil when it
// has no error line.
func ParseErr(stderr string) error {
	for _, line := range strings.Split(stderr, "\n") {
		text, ok := strings.CutPrefix(line, errPrefix)
		if !ok {
			continue
		}
		var w wireError
		if json.Unmarshal([]byte(text), &w) != nil {
			return fmt.Errorf("a file operation failed: %q", text)
		}
		return fromKind(w.Kind, w.Message)
	}
	return nil
}

func kindOf(err error) string {
	var r *safetar.Refusal
	var errno syscall.Errno
	switch {
	case errors.As(err, &r), errors.Is(err, errdefs.ErrInvalidArgument):
		return kindInvalid
	case errors.Is(err, errdefs.ErrNotFound):
		return kindNotFound
	case errors.Is(err, errdefs.ErrFailedPrecondition):
		return kindPrecond
	case errors.Is(err, errdefs.ErrPermissionDenied):
		return kindPermission
	case errors.Is(err, errdefs.ErrResourceExhausted):
		return kindNoSpace
	case errors.As(err, &errno):
		switch errno {
		case syscall.ENOENT:
			return kindNotFound
		case syscall.ENOTDIR, syscall.EISDIR, syscall.EEXIST, syscall.ENOTEMPTY:
			return kindPrecond
		case syscall.EACCES, syscall.EPERM, syscall.EROFS:
			return kindPermission
		case syscall.ENOSPC, syscall.EDQUOT:
			return kindNoSpace
		}
	}
	return kindOther
}

func fromKind(kind, msg string) error {
	switch kind {
	case kindNotFound:
		return errdefs.NotFound("%s", msg)
	case kindPrecond:
		return errdefs.FailedPrecondition("%s", msg)
	case kindInvalid:
		return errdefs.InvalidArgument("%s", msg)
	case kindPermission:
		return errdefs.PermissionDenied("%s", msg)
	case kindNoSpace:
		return errdefs.ResourceExhausted("%s", msg)
	}
	return errors.New(msg)
}

// Classify gives an error of the file system its class and a message that
// names the path as the sandbox sees it.
func Classify(path string, err error) error {
	if err == nil {
		return nil
	}
	var r *safetar.Refusal
	if errors.As(err, &r) {
		var errno syscall.Errno
		if r.Err != nil && !isEscape(r.Err) && errors.As(r.Err, &errno) {
			// The file system said no (read-only, full, missing): its class.
			switch kindOf(errno) {
			case kindPermission:
				return errdefs.PermissionDenied("copy into %s: %v (the sandbox's user or policy (filesystem_policy) does not allow it)", path, err)
			case kindNoSpace:
				return errdefs.ResourceExhausted("copy into %s: %v (no space left on the sandbox's disk (ENOSPC: limits.disk is full))", path, err)
			}
		}
		return errdefs.InvalidArgument("copy into %s refused: %v", path, err)
	}
	if k := kindOf(err); k != kindOther || isEscape(err) {
		var errno syscall.Errno
		errors.As(err, &errno)
		switch {
		case isEscape(err):
			return errdefs.InvalidArgument("%s: the path leads outside the sandbox's root (through \"..\" or a symlink)", path)
		case errors.Is(err, fs.ErrNotExist):
			return errdefs.NotFound("%s: no such file or directory", path)
		case errno == syscall.ENOTDIR:
			return errdefs.FailedPrecondition("%s: not a directory (a part of the path is a file)", path)
		case errno == syscall.EISDIR:
			return errdefs.FailedPrecondition("%s: is a directory", path)
		case errno == syscall.EEXIST:
			return errdefs.FailedPrecondition("%s: already exists", path)
		case errno == syscall.ENOTEMPTY:
			return errdefs.FailedPrecondition("%s: the directory is not empty (remove it recursively)", path)
		case errno == syscall.EACCES || errno == syscall.EPERM || errno == syscall.EROFS:
			return errdefs.PermissionDenied("%s: permission denied: the sandbox's user or policy (filesystem_policy) does not allow it", path)
		case errno == syscall.ENOSPC || errno == syscall.EDQUOT:
			return errdefs.ResourceExhausted("%s: no space left on the sandbox's disk (ENOSPC: limits.disk is full)", path)
		}
		return err
	}
	return err
}

// isEscape tells an os.Root's refusal of a path that leads out of it.
func isEscape(err error) bool {
	var perr *os.PathError
	return errors.As(err, &perr) && (strings.Contains(perr.Err.Error(), "path escapes") || errors.Is(perr.Err, syscall.ELOOP))
}
