"""How the SDK reaches a gateway: as the corral command line does."""

import collections
import os
import pathlib
from urllib.parse import urlparse

import grpc

from .v1 import files_pb2_grpc, sandbox_pb2_grpc, snapshots_pb2_grpc, tenants_pb2_grpc

# The HTTP/2 windows the gateway uses for file copies.
_OPTIONS = [
    ("grpc.http2.lookahead_bytes", 4 << 20),
    ("grpc.max_receive_message_length", 8 << 20),
]


def default_home():
    """CORRAL_HOME, else /var/lib/corral as root, else $XDG_DATA_HOME/corral."""
    if os.environ.get("CORRAL_HOME"):
        return os.environ["CORRAL_HOME"]
    if os.geteuid() == 0:
        return "/var/lib/corral"
    data = os.environ.get("XDG_DATA_HOME") or os.path.join(pathlib.Path.home(), ".local", "share")
    return os.path.join(data, "corral")


def config_path():
    """Where the command line keeps its contexts."""
    if os.environ.get("CORRAL_CONFIG"):
        return os.environ["CORRAL_CONFIG"]
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(pathlib.Path.home(), ".config")
    return os.path.join(base, "corral", "config")


def _context(name):
    try:
        import yaml  # Debian's python3-yaml; only contexts need it
    except ImportError as e:
        raise RuntimeError(f"context {name!r}: reading {config_path()} needs PyYAML (python3-yaml); "
                           "or give address= and ca= with cert= and key= or token=") from e
    try:
        with open(config_path(), encoding="utf-8") as f:
            cfg = yaml.safe_load(f) or {}
    except FileNotFoundError:
        cfg = {}
    if not name:
        name = cfg.get("current-context", "")
        if not name:
            return None
    entry = (cfg.get("contexts") or {}).get(name)
    if entry is None:
        raise ValueError(f"context {name!r} not found (see corral context list)")
    return entry


# The environment variables a Gateway reads when its token or tenant is not given.
TOKEN_ENV = "CORRAL_TOKEN"
TENANT_ENV = "CORRAL_TENANT"


def call_metadata(token=None, tenant=None):
    """The metadata a call carries to act as ``token`` in ``tenant``: the
    bearer token in "authorization", the tenant in "corral-tenant"."""
    md = []
    if token:
        md.append(("authorization", "Bearer " + token))
    if tenant:
        md.append(("corral-tenant", tenant))
    return tuple(md)


class _CallDetails(collections.namedtuple("_CallDetails", ("method", "timeout", "metadata", "credentials",
                                                           "wait_for_ready", "compression")),
                   grpc.ClientCallDetails):
    pass


class _CallAs(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor,
              grpc.StreamUnaryClientInterceptor, grpc.StreamStreamClientInterceptor):
    """Puts the token and the tenant on every call of a channel, beside the
    metadata the call was given."""

    def __init__(self, metadata):
        self.metadata = tuple(metadata)

    def _details(self, d):
        return _CallDetails(d.method, d.timeout, tuple(d.metadata or ()) + self.metadata, d.credentials,
                            getattr(d, "wait_for_ready", None), getattr(d, "compression", None))

    def intercept_unary_unary(self, continuation, details, request):
        return continuation(self._details(details), request)

    def intercept_unary_stream(self, continuation, details, request):
        return continuation(self._details(details), request)

    def intercept_stream_unary(self, continuation, details, requests):
        return continuation(self._details(details), requests)

    def intercept_stream_stream(self, continuation, details, requests):
        return continuation(self._details(details), requests)


class Gateway:
    """A connection to a gateway.

    With no arguments it is the gateway the command line reaches: CORRAL_HOME's
    socket, else the current context, else the default home's socket. Give
    ``address`` ("unix:///path/corral.sock" or "https://HOST:PORT" with ``ca``
    and either ``cert`` and ``key`` or a ``token``), a ``context`` name, or a
    ``home``.

    ``token`` is a bearer token (corral token create) to call as, sent on every
    call; ``tenant`` names the tenant to act in, for an admin (others may name
    only their own). Not given, they are $CORRAL_TOKEN and $CORRAL_TENANT, else
    the context's ``token`` and ``tenant``.
    """

    def __init__(self, address=None, *, context=None, home=None, ca=None, cert=None, key=None, token=None,
                 tenant=None):
        entry = None
        if address is None:
            if context is None and (home or os.environ.get("CORRAL_HOME")):
                address = "unix://" + os.path.join(home or default_home(), "corral.sock")
            else:
                entry = _context(context)
                if entry is None:
                    address = "unix://" + os.path.join(default_home(), "corral.sock")
                else:
                    address = entry["gateway"]
                    ca, cert, key = entry.get("ca"), entry.get("cert"), entry.get("key")
        entry = entry or {}
        token = token or os.environ.get(TOKEN_ENV) or entry.get("token") or None
        tenant = tenant or os.environ.get(TENANT_ENV) or entry.get("tenant") or None
        self.address = address
        self.tenant = tenant
        if address.startswith("unix://"):
            channel = grpc.insecure_channel(address, options=_OPTIONS)
        elif address.startswith("https://"):
            u = urlparse(address)
            if not u.port:
                raise ValueError(f"gateway {address!r}: want https://HOST:PORT")
            if not ca or not (cert or key or token):
                raise ValueError(f"gateway {address}: an https gateway needs ca=, cert= and key= (see corral gateway "
                                 f"client-cert), or ca= and a bearer token (token= or ${TOKEN_ENV}; see corral token "
                                 "create)")
            if bool(cert) != bool(key):
                raise ValueError(f"gateway {address}: a client certificate needs its key, and a key its certificate "
                                 "(cert= and key=)")
            creds = grpc.ssl_channel_credentials(
                root_certificates=pathlib.Path(ca).read_bytes(),
                private_key=pathlib.Path(key).read_bytes() if key else None,
                certificate_chain=pathlib.Path(cert).read_bytes() if cert else None)
            channel = grpc.secure_channel(f"{u.hostname}:{u.port}", creds, options=_OPTIONS)
        else:
            raise ValueError(f"gateway {address!r}: want unix:///path/corral.sock or https://HOST:PORT")
        md = call_metadata(token, tenant)
        self.channel = grpc.intercept_channel(channel, _CallAs(md)) if md else channel
        self.sandboxes = sandbox_pb2_grpc.SandboxServiceStub(self.channel)
        self.files = files_pb2_grpc.FileServiceStub(self.channel)
        self.tenants = tenants_pb2_grpc.TenantServiceStub(self.channel)
        self.snapshots = snapshots_pb2_grpc.SnapshotServiceStub(self.channel)

    def close(self):
        self.channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
