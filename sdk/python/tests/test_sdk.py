"""The Python SDK against a real gateway, which cmd/corral's
TestPythonSDK starts: CORRAL_HOME is its home (native driver), and
CORRAL_GATEWAY_URL, CORRAL_CA, CORRAL_CERT and CORRAL_KEY its TLS
listener and a client certificate of its CA; a warm pool "warm" is ready;
CORRAL_TEST_MEMBER_TOKEN is a member token of tenant "sdk"."""

import concurrent.futures
import os
import pathlib
import re
import subprocess
import sys
import time

import grpc
import pytest

import corral
from corral import Gateway, Sandbox
import corral.v1.snapshots_pb2
from corral.v1 import sandbox_pb2, tenants_pb2


def test_lifecycle_exec_files_logs_ports():
    with Sandbox.create("py-life", command=["sh", "-c", "echo started; exec /bin/busybox nc -ll -p 7070 -e /bin/cat"]) as sb:
        assert sb.phase == "ready"
        r = sb.exec(["echo", "hello", "python"])
        assert (r.stdout, r.stderr, r.exit_code) == ("hello python\n", "", 0)
        r = sb.exec("echo $X >&2; pwd; exit 3", env={"X": "x1"}, cwd="/tmp")
        assert (r.stdout, r.stderr, r.exit_code) == ("/tmp\n", "x1\n", 3)
        assert sb.exec(["cat"], stdin="through stdin").stdout == "through stdin"
        assert sb.exec(["/no/such/program"]).exit_code == 127
        chunks = list(sb.exec_stream(["sh", "-c", "echo a; echo b >&2"]))
        assert ("exit", 0) == chunks[-1]

        sb.files.mkdir("dir")
        info = sb.files.write("dir/note.txt", "a note\n", mode=0o600)
        assert info.size == 7 and info.mode & 0o777 == 0o600
        assert sb.files.read("/sandbox/dir/note.txt") == b"a note\n"
        assert [f.name for f in sb.files.list("dir")] == ["note.txt"]
        assert sb.files.stat("dir").type == "dir"
        sb.files.remove("dir", recursive=True)
        with pytest.raises(corral.NotFound):
            sb.files.stat("dir")

        assert "started" in sb.logs()
        assert sb.ports.forward(7070, "ping\n") == b"ping\n"
        assert re.fullmatch(r"127\.0\.0\.1:\d+", sb.ports.expose(7070))

        sb.stop()
        assert sb.phase == "stopped"
        sb.files.write("written-while-stopped", "x")
        sb.start()
        assert sb.phase == "ready"
    with pytest.raises(corral.NotFound):
        Sandbox.connect("py-life")


def test_pause_snapshot_fork():
    with Sandbox.create("py-snap") as sb:
        sb.files.write("state.txt", "before\n")
        with pytest.raises(corral.FailedPrecondition, match="memory_snapshots"):
            sb.pause(memory=True)  # its policy cannot be checkpointed: the reason, and nothing changed
        sb.pause()
        assert sb.phase == "paused"
        with pytest.raises(corral.FailedPrecondition):
            sb.exec(["true"])
        sb.resume()
        assert sb.phase == "ready"
        snap = sb.snapshot("py-base")
        assert (snap.name, snap.sandbox, snap.files) == ("py-base", "py-snap", 1)
        forks = sb.fork(2, name_prefix="py-try")
        try:
            assert [f.name for f in forks] == ["py-try-1", "py-try-2"]
            forks[0].files.write("state.txt", "changed\n")
            assert forks[1].files.read("state.txt") == b"before\n"  # each has its own copy
        finally:
            for f in forks:
                f.delete(force=True)
        with Sandbox.create("py-back", from_snapshot="py-base", gateway=sb._gw) as back:
            assert back.files.read("state.txt") == b"before\n"
        gw = Gateway()
        try:
            gw.snapshots.DeleteSnapshot(corral.v1.snapshots_pb2.DeleteSnapshotRequest(name="py-base"))
        finally:
            gw.close()


def test_exec_timeout():
    with Sandbox.create("py-timeout") as sb:
        with pytest.raises(corral.Timeout):
            sb.exec(["sleep", "30"], timeout=1)
        assert sb.exec(["true"]).exit_code == 0  # the sandbox is still there


def test_typed_errors():
    with pytest.raises(corral.NotFound) as e:
        Sandbox.connect("no-such-sandbox")
    assert e.value.reason == 'sandbox "no-such-sandbox" not found'
    with pytest.raises(corral.InvalidArgument):
        Sandbox.create("Bad_Name")
    with Sandbox.create("py-errors") as sb:
        with pytest.raises(corral.InvalidArgument):
            sb.exec(["x" * (1 << 20)])
        with pytest.raises(corral.AlreadyExists):
            Sandbox.create("py-errors")
    with pytest.raises(corral.Unavailable) as e:
        Sandbox.connect("x", gateway=Gateway(home="/nonexistent"))
    assert "is `corral gateway` running?" in e.value.reason


def test_bad_input_and_many_calls():
    with Sandbox.create("py-many") as sb:
        with pytest.raises(corral.InvalidArgument, match='".." is not taken'):
            sb.files.read("../etc/passwd")
        with concurrent.futures.ThreadPoolExecutor(max_workers=32) as pool:
            results = list(pool.map(lambda i: sb.exec(["echo", str(i)]).stdout, range(100)))
        assert results == [f"{i}\n" for i in range(100)]
        assert sb.exec(["true"]).exit_code == 0


def test_pool_claim():
    with Sandbox.create("py-claimed", pool="warm", labels={"who": "python"}) as sb:
        assert sb.phase == "ready"
        assert sb.exec(["echo", "from the pool"]).stdout == "from the pool\n"


def test_remote_over_mutual_tls():
    gw = Gateway(os.environ["CORRAL_GATEWAY_URL"], ca=os.environ["CORRAL_CA"], cert=os.environ["CORRAL_CERT"],
                 key=os.environ["CORRAL_KEY"])
    with gw, Sandbox.create("py-remote", gateway=gw) as sb:
        assert sb.exec(["echo", "over mTLS"]).stdout == "over mTLS\n"
    with pytest.raises(ValueError):
        Gateway(os.environ["CORRAL_GATEWAY_URL"])


def _typed(gw, fn, request):
    """A call of a raw stub, its error as the SDK's class."""
    try:
        return fn(request, timeout=30)
    except grpc.RpcError as e:
        raise corral.errors.from_rpc(e, gw.address) from None


def test_member_token_sees_only_its_tenant():
    with Gateway() as admin:  # the local admin, in tenant default: the pool's member (it refills after a claim)
        deadline = time.monotonic() + 60
        while True:
            pooled = [s.id for s in _typed(admin, admin.sandboxes.ListSandboxes,
                                           sandbox_pb2.ListSandboxesRequest(labels={"corral.pool": "warm"})).sandboxes
                      if s.tenant == "default"]
            if pooled or time.monotonic() > deadline:
                break
            time.sleep(0.2)
    assert pooled, 'the pool "warm" has no member'

    with Gateway(os.environ["CORRAL_GATEWAY_URL"], ca=os.environ["CORRAL_CA"],
                 token=os.environ["CORRAL_TEST_MEMBER_TOKEN"]) as gw:
        with Sandbox.create("py-member", gateway=gw, timeout=60) as sb:
            record = _typed(gw, gw.sandboxes.GetSandbox, sandbox_pb2.GetSandboxRequest(name=sb.id))
            assert record.tenant == "sdk"
            assert sb.exec(["echo", "hi"], timeout=30).stdout == "hi\n"

            listed = _typed(gw, gw.sandboxes.ListSandboxes, sandbox_pb2.ListSandboxesRequest()).sandboxes
            assert sb.id in [s.id for s in listed]
            assert {s.tenant for s in listed} == {"sdk"}, [(s.name, s.tenant) for s in listed]
            assert pooled[0] not in [s.id for s in listed]

            tenant = _typed(gw, gw.tenants.GetTenant, tenants_pb2.GetTenantRequest(name=""))
            assert tenant.name == "sdk" and tenant.usage.sandboxes >= 1, tenant

            with pytest.raises(corral.PermissionDenied):
                _typed(gw, gw.tenants.ListTenants, tenants_pb2.ListTenantsRequest())
            with pytest.raises(corral.NotFound):
                Sandbox.connect(pooled[0], gateway=gw)
        with pytest.raises(corral.NotFound):
            Sandbox.connect("py-member", gateway=gw)  # deleted at the block's end


def test_files_watch():
    with Sandbox.create("py-watch") as sb:
        changes = sb.files.watch("/sandbox")
        assert next(changes)[0] == "ready"
        sb.files.write("watched.txt", "x")
        for _, path in changes:
            if path.endswith("watched.txt"):
                break
        changes.close()


def test_context(tmp_path, monkeypatch):
    config = tmp_path / "config"
    config.write_text(
        "current-context: local\ncontexts:\n"
        f"  remote:\n    gateway: {os.environ['CORRAL_GATEWAY_URL']}\n    ca: {os.environ['CORRAL_CA']}\n"
        f"    cert: {os.environ['CORRAL_CERT']}\n    key: {os.environ['CORRAL_KEY']}\n"
        "  local:\n    gateway: unix:///nonexistent/corral.sock\n")
    monkeypatch.setenv("CORRAL_CONFIG", str(config))
    gw = Gateway(context="remote")
    assert gw.address == os.environ["CORRAL_GATEWAY_URL"]
    with gw, Sandbox.create("py-context", gateway=gw) as sb:
        assert sb.exec(["echo", "through a context"]).stdout == "through a context\n"
    with pytest.raises(ValueError, match="context 'gone' not found"):
        Gateway(context="gone")


def test_readme_example_runs_as_written():
    readme = pathlib.Path(__file__).parent.parent / "README.md"
    example = re.search(r"```python\n(.*?)```", readme.read_text(), re.S).group(1)
    out = subprocess.run([sys.executable, "-c", example], capture_output=True, text=True, check=True)
    assert out.stdout == "hello from the sandbox\n\n"


def test_agent_example_runs_as_written():
    example = pathlib.Path(__file__).parents[3] / "examples" / "python" / "agent.py"
    out = subprocess.run([sys.executable, str(example)], capture_output=True, text=True, check=True)
    assert out.stdout == "the answer is 42\n"
