"""How the SDK reaches a gateway: as the corral command line does."""

import os
import pathlib
from urllib.parse import urlparse

import grpc

from .v1 import files_pb2_grpc, sandbox_pb2_grpc

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
                           "or give address=, ca=, cert= and key=") from e
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


class Gateway:
    """A connection to a gateway.

    With no arguments it is the gateway the command line reaches: CORRAL_HOME's
    socket, else the current context, else the default home's socket. Give
    ``address`` ("unix:///path/corral.sock" or "https://HOST:PORT" with ``ca``,
    ``cert`` and ``key``), a ``context`` name, or a ``home``.
    """

    def __init__(self, address=None, *, context=None, home=None, ca=None, cert=None, key=None):
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
        self.address = address
        if address.startswith("unix://"):
            self.channel = grpc.insecure_channel(address, options=_OPTIONS)
        elif address.startswith("https://"):
            u = urlparse(address)
            if not u.port:
                raise ValueError(f"gateway {address!r}: want https://HOST:PORT")
            if not (ca and cert and key):
                raise ValueError(f"gateway {address}: an https gateway needs ca=, cert= and key= (see corral gateway client-cert)")
            creds = grpc.ssl_channel_credentials(
                root_certificates=pathlib.Path(ca).read_bytes(),
                private_key=pathlib.Path(key).read_bytes(),
                certificate_chain=pathlib.Path(cert).read_bytes())
            self.channel = grpc.secure_channel(f"{u.hostname}:{u.port}", creds, options=_OPTIONS)
        else:
            raise ValueError(f"gateway {address!r}: want unix:///path/corral.sock or https://HOST:PORT")
        self.sandboxes = sandbox_pb2_grpc.SandboxServiceStub(self.channel)
        self.files = files_pb2_grpc.FileServiceStub(self.channel)

    def close(self):
        self.channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
