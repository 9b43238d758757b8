"""Bearer tokens and tenants, without a gateway: a stand-in gRPC server
records the metadata each kind of call arrives with, over the Unix socket
and over TLS without a client certificate."""

import concurrent.futures
import shutil
import subprocess
import tempfile

import grpc
import pytest

from corral import Gateway, Sandbox
from corral.v1 import (files_pb2, files_pb2_grpc, sandbox_pb2, sandbox_pb2_grpc, tenants_pb2,
                       tenants_pb2_grpc)

TOKEN = "corral_tk_0123456789abcdef"
_KEYS = ("authorization", "corral-tenant", "x-caller")


@pytest.fixture(autouse=True)
def _no_ambient_gateway(tmp_path, monkeypatch):
    """What the suite's environment says of a gateway does not reach these tests."""
    for name in ("CORRAL_HOME", "CORRAL_TOKEN", "CORRAL_TENANT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CORRAL_CONFIG", str(tmp_path / "no-config"))


class _Recorder(sandbox_pb2_grpc.SandboxServiceServicer, files_pb2_grpc.FileServiceServicer,
                tenants_pb2_grpc.TenantServiceServicer):
    """Answers a few calls of each kind, keeping the metadata each came with."""

    def __init__(self):
        self.calls = []

    def _keep(self, method, context):
        self.calls.append((method, {k: v for k, v in context.invocation_metadata() if k in _KEYS}))

    def GetSandbox(self, request, context):  # unary-unary
        self._keep("GetSandbox", context)
        return sandbox_pb2.Sandbox(name=request.name, id="sb-1", phase="ready")

    def WaitSandbox(self, request, context):  # unary-stream
        self._keep("WaitSandbox", context)
        yield sandbox_pb2.SandboxEvent(type="REACHED")

    def WriteFile(self, request_iterator, context):  # stream-unary
        self._keep("WriteFile", context)
        for _ in request_iterator:
            pass
        return files_pb2.FileInfo(name="f")

    def ExecSandbox(self, request_iterator, context):  # stream-stream
        self._keep("ExecSandbox", context)
        for _ in request_iterator:
            pass
        yield sandbox_pb2.ExecResponse()

    def GetTenant(self, request, context):
        self._keep("GetTenant", context)
        return tenants_pb2.Tenant(name=request.name or "acme")


def _serve(port_spec, credentials=None):
    rec = _Recorder()
    server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=4))
    sandbox_pb2_grpc.add_SandboxServiceServicer_to_server(rec, server)
    files_pb2_grpc.add_FileServiceServicer_to_server(rec, server)
    tenants_pb2_grpc.add_TenantServiceServicer_to_server(rec, server)
    port = server.add_secure_port(port_spec, credentials) if credentials else server.add_insecure_port(port_spec)
    server.start()
    return server, rec, port


@pytest.fixture
def socket_server():
    home = tempfile.mkdtemp(prefix="corral-sdk-")  # short: a socket's path is bounded
    server, rec, _ = _serve(f"unix:{home}/corral.sock")
    yield home, rec
    server.stop(None)
    shutil.rmtree(home, ignore_errors=True)


def _every_kind_of_call(gw):
    gw.sandboxes.GetSandbox(sandbox_pb2.GetSandboxRequest(name="a"), metadata=(("x-caller", "kept"),))
    list(gw.sandboxes.WaitSandbox(sandbox_pb2.WaitSandboxRequest(name="a")))
    gw.files.WriteFile(iter([files_pb2.WriteFileRequest()]))
    list(gw.sandboxes.ExecSandbox(iter([sandbox_pb2.ExecRequest()])))
    assert gw.tenants.GetTenant(tenants_pb2.GetTenantRequest()).name == "acme"
    assert Sandbox.connect("a", gateway=gw).id == "sb-1"


def test_token_and_tenant_on_every_call(socket_server):
    home, rec = socket_server
    with Gateway(home=home, token=TOKEN, tenant="acme") as gw:
        _every_kind_of_call(gw)
    want = {"authorization": "Bearer " + TOKEN, "corral-tenant": "acme"}
    assert [m for m, _ in rec.calls] == ["GetSandbox", "WaitSandbox", "WriteFile", "ExecSandbox", "GetTenant",
                                         "GetSandbox"]
    assert rec.calls[0][1] == {**want, "x-caller": "kept"}
    assert all(md == want for _, md in rec.calls[1:]), rec.calls

    rec.calls.clear()
    with Gateway(home=home) as gw:  # no token, no tenant: no metadata of theirs
        _every_kind_of_call(gw)
    assert rec.calls[0][1] == {"x-caller": "kept"}
    assert all(md == {} for _, md in rec.calls[1:]), rec.calls


def test_token_and_tenant_from_environment_then_context(socket_server, tmp_path, monkeypatch):
    home, rec = socket_server
    config = tmp_path / "config"
    config.write_text("current-context: local\ncontexts:\n"
                      f"  local:\n    gateway: unix://{home}/corral.sock\n    token: from-context\n"
                      "    tenant: ctx-tenant\n")
    monkeypatch.setenv("CORRAL_CONFIG", str(config))

    def seen(**kwargs):
        rec.calls.clear()
        with Gateway(**kwargs) as gw:
            gw.tenants.GetTenant(tenants_pb2.GetTenantRequest())
        return rec.calls[0][1]

    assert seen() == {"authorization": "Bearer from-context", "corral-tenant": "ctx-tenant"}
    assert seen(context="local") == {"authorization": "Bearer from-context", "corral-tenant": "ctx-tenant"}
    monkeypatch.setenv("CORRAL_TOKEN", "from-env")
    monkeypatch.setenv("CORRAL_TENANT", "env-tenant")
    assert seen() == {"authorization": "Bearer from-env", "corral-tenant": "env-tenant"}
    assert seen(token=TOKEN, tenant="acme") == {"authorization": "Bearer " + TOKEN, "corral-tenant": "acme"}
    # an address given outright takes no context's token, only the environment's
    monkeypatch.delenv("CORRAL_TOKEN")
    monkeypatch.delenv("CORRAL_TENANT")
    assert seen(address=f"unix://{home}/corral.sock") == {}


def test_https_needs_ca_and_a_certificate_or_a_token(tmp_path, monkeypatch):
    ca, cert, key = (tmp_path / n for n in ("ca.crt", "me.crt", "me.key"))
    for f in (ca, cert, key):
        f.write_text("-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n")
    url = "https://gw.example:7443"
    Gateway(url, ca=str(ca), token=TOKEN).close()
    Gateway(url, ca=str(ca), cert=str(cert), key=str(key)).close()
    Gateway(url, ca=str(ca), cert=str(cert), key=str(key), token=TOKEN, tenant="acme").close()
    with pytest.raises(ValueError, match="needs ca=, cert= and key= .*, or ca= and a bearer token"):
        Gateway(url, ca=str(ca))
    with pytest.raises(ValueError, match="needs ca=, cert= and key= .*, or ca= and a bearer token"):
        Gateway(url, token=TOKEN)
    with pytest.raises(ValueError, match="needs ca=, cert= and key="):
        Gateway(url, cert=str(cert), key=str(key))
    with pytest.raises(ValueError, match="a client certificate needs its key"):
        Gateway(url, ca=str(ca), cert=str(cert), token=TOKEN)
    monkeypatch.setenv("CORRAL_TOKEN", TOKEN)
    Gateway(url, ca=str(ca)).close()  # the token of the environment will do

    config = tmp_path / "config"
    config.write_text(f"current-context: remote\ncontexts:\n  remote:\n    gateway: {url}\n    ca: {ca}\n"
                      f"    token: {TOKEN}\n")
    monkeypatch.setenv("CORRAL_CONFIG", str(config))
    monkeypatch.delenv("CORRAL_TOKEN")
    with Gateway() as gw:
        assert gw.address == url


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl to make a server certificate")
def test_token_over_tls_without_a_client_certificate(tmp_path):
    crt, key = tmp_path / "server.crt", tmp_path / "server.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                    "-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost",
                    "-keyout", str(key), "-out", str(crt)], check=True, capture_output=True)
    creds = grpc.ssl_server_credentials([(key.read_bytes(), crt.read_bytes())], require_client_auth=False)
    server, rec, port = _serve("localhost:0", creds)
    try:
        with Gateway(f"https://localhost:{port}", ca=str(crt), token=TOKEN, tenant="acme") as gw:
            _every_kind_of_call(gw)
    finally:
        server.stop(None)
    want = {"authorization": "Bearer " + TOKEN, "corral-tenant": "acme"}
    assert len(rec.calls) == 6 and all({k: md[k] for k in want} == want for _, md in rec.calls), rec.calls
