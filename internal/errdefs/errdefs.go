// Package errdefs defines the error classes that callers branch on. Errors
// are wrapped with these classes and mapped to gRPC codes only at the API edge.
package errdefs

import (
	"errors"
	"fmt"
)

// The error classes. Wrap them with fmt.Errorf("...: %w", ErrX) or use the
// constructors below; test them with errors.Is.
var (
	ErrNotFound           = errors.New("not found")
	ErrAlreadyExists      = errors.New("already exists")
	ErrInvalidArgument    = errors.New("invalid argument")
	ErrFailedPrecondition = errors.New("failed precondition")
	ErrUnavailable        = errors.New("unavailable")
	ErrNotImplemented     = errors.New("not implemented")
	ErrPermissionDenied   = errors.New("permission denied")
	ErrResourceExhausted  = errors.New("resource exhausted")
	ErrUnauthenticated    = errors.New("unauthenticated")
)

// classed is an error with a message of its own and a class for errors.Is;
// a cause wrapped with %w in its message stays reachable (errors.Is, As).
type classed struct {
	err   error // the message, and the causes it wraps
	class error
}

func (e *classed) Error() string        { return e.err.Error() }
func (e *classed) Is(target error) bool { return target == e.class }
func (e *classed) Unwrap() error        { return e.err }

func newf(class error, format string, args ...any) error {
	return &classed{err: fmt.Errorf(format, args...), class: class}
}

// NotFound returns an ErrNotFound error with the given message.
func NotFound(format string, args ...any) error { return newf(ErrNotFound, format, args...) }

// AlreadyExists returns an ErrAlreadyExists error with the given message.
func AlreadyExists(format string, args ...any) error {
	return newf(ErrAlreadyExists, format, args...)
}

// InvalidArgument returns an ErrInvalidArgument error with the given message.
func InvalidArgument(format string, args ...any) error {
	return newf(ErrInvalidArgument, format, args...)
}

// FailedPrecondition returns an ErrFailedPrecondition error with the given message.
func FailedPrecondition(format string, args ...any) error {
	return newf(ErrFailedPrecondition, format, args...)
}

// Unavailable returns an ErrUnavailable error with the given message.
func Unavailable(format string, args ...any) error { return newf(ErrUnavailable, format, args...) }

// NotImplemented returns an ErrNotImplemented error with the given message.
func NotImplemented(format string, args ...any) error {
	return newf(ErrNotImplemented, format, args...)
}

// PermissionDenied is an ErrPermissionDenied error: what the sandbox's
// policy or user may not do.
func PermissionDenied(format string, args ...any) error {
	return newf(ErrPermissionDenied, format, args...)
}

// ResourceExhausted is an ErrResourceExhausted error: a quota is full.
func ResourceExhausted(format string, args ...any) error {
	return newf(ErrResourceExhausted, format, args...)
}

// Unauthenticated is an ErrUnauthenticated error: no valid certificate or
// token came with the request.
func Unauthenticated(format string, args ...any) error {
	return newf(ErrUnauthenticated, format, args...)
}
