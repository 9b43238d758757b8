"""The Python SDK of corral: sandboxes for untrusted code, on a corral gateway.

    from corral import Sandbox

    with Sandbox.create("demo") as sb:           # deleted at the end of the block
        print(sb.exec("echo hello").stdout)

It reaches the gateway as the corral command line does (CORRAL_HOME's socket,
else the current context, else the default home's socket); see Gateway for a
remote one over TLS, with a client certificate or a bearer token (CORRAL_TOKEN).
"""

from .errors import (AlreadyExists, CorralError, FailedPrecondition, InvalidArgument, NotFound, PermissionDenied,
                     ResourceExhausted, Timeout, Unauthenticated, Unavailable)
from .gateway import Gateway
from .sandbox import ExecResult, FileInfo, Files, Ports, Sandbox

__all__ = ["Sandbox", "Gateway", "ExecResult", "FileInfo", "Files", "Ports", "CorralError", "NotFound", "AlreadyExists",
           "InvalidArgument", "FailedPrecondition", "PermissionDenied", "Unauthenticated", "ResourceExhausted", "Unavailable",
           "Timeout"]
