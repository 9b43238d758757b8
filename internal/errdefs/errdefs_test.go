package errdefs

import (
	"errors"
	"io/fs"
	"testing"
)

// A constructor's error has its class and keeps the cause it wraps, with
// the message as written.
func TestClassesKeepTheirCause(t *testing.T) {
	err := InvalidArgument("sandbox %q: %w", "x", fs.ErrNotExist)
	if !errors.Is(err, ErrInvalidArgument) || !errors.Is(err, fs.ErrNotExist) || errors.Is(err, ErrNotFound) {
		t.Errorf("%v: class and cause lost or mixed up", err)
	}
	if got, want := err.Error(), `sandbox "x": file does not exist`; got != want {
		t.Errorf("message %q, want %q", got, want)
	}
	var pathErr *fs.PathError
	wrapped := NotFound("open: %w", &fs.PathError{Op: "open", Path: "/p", Err: fs.ErrNotExist})
	if !errors.As(wrapped, &pathErr) || pathErr.Path != "/p" {
		t.Errorf("errors.As through %v: %v", wrapped, pathErr)
	}
}
