"""Errors of the corral SDK: one class per kind of answer, each carrying the
gateway's one-line reason."""

import grpc


class CorralError(Exception):
    """An error the gateway answered with (or the failure to reach it).

    ``reason`` is the gateway's one-line reason; ``code`` the gRPC status code.
    """

    def __init__(self, reason, code=None):
        super().__init__(reason)
        self.reason = reason
        self.code = code


class NotFound(CorralError):
    """No such sandbox, file or pool."""


class AlreadyExists(CorralError):
    """A sandbox or pool of that name exists."""


class InvalidArgument(CorralError):
    """The request is malformed: a bad name, command, path or policy."""


class FailedPrecondition(CorralError):
    """The sandbox is not in a state for it (not ready, being deleted, ...)."""


class PermissionDenied(CorralError):
    """The caller may not do it, or the sandbox's policy refuses it."""


class Unauthenticated(PermissionDenied):
    """No valid client certificate or token came with the call (a token
    unknown, revoked or expired)."""


class ResourceExhausted(CorralError):
    """A bound was reached (a disk, a count of watches, ...)."""


class Unavailable(CorralError):
    """The gateway cannot be reached, or is shutting down."""


class Timeout(CorralError, TimeoutError):
    """The call ran past the time it was given."""


_CLASSES = {
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExists,
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPrecondition,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhausted,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.DEADLINE_EXCEEDED: Timeout,
}


def from_rpc(err, address=""):
    """The CorralError of a grpc.RpcError."""
    code = err.code() if hasattr(err, "code") else None
    reason = err.details() if hasattr(err, "details") else str(err)
    if code == grpc.StatusCode.UNAVAILABLE and "connect" in (reason or "").lower():
        reason = f"cannot reach the gateway at {address}: is `corral gateway` running? ({reason})"
    return _CLASSES.get(code, CorralError)(reason or str(code), code)
