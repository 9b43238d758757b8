package service

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/corral-sandbox/corral/internal/errdefs"
)

// toGRPC maps an error to a gRPC status error, keeping its message: the
// only place where errdefs' classes meet gRPC's codes (the supervisor,
// which shares errdefs, links no gRPC at all).
func toGRPC(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Error(code(err), err.Error())
}

// code returns the gRPC code of an error's class.
func code(err error) codes.Code {
	switch {
	case errors.Is(err, errdefs.ErrNotFound):
		return codes.NotFound
	case errors.Is(err, errdefs.ErrAlreadyExists):
		return codes.AlreadyExists
	case errors.Is(err, errdefs.ErrInvalidArgument):
		return codes.InvalidArgument
	case errors.Is(err, errdefs.ErrFailedPrecondition):
		return codes.FailedPrecondition
	case errors.Is(err, errdefs.ErrUnavailable):
		return codes.Unavailable
	case errors.Is(err, errdefs.ErrNotImplemented):
		return codes.Unimplemented
	case errors.Is(err, errdefs.ErrPermissionDenied):
		return codes.PermissionDenied
	case errors.Is(err, errdefs.ErrResourceExhausted):
		return codes.ResourceExhausted
	case errors.Is(err, errdefs.ErrUnauthenticated):
		return codes.Unauthenticated
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		return codes.Canceled
	}
	return codes.Internal
}
