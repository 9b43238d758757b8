"""Sandboxes, as an agent drives them."""

import dataclasses
import queue

import threading

import grpc

from . import errors
from .gateway import Gateway
from .v1 import files_pb2, sandbox_pb2, snapshots_pb2

_CHUNK = 256 << 10


@dataclasses.dataclass
class ExecResult:
    """What a command printed, and how it ended."""

    stdout: str
    stderr: str
    exit_code: int


@dataclasses.dataclass
class FileInfo:
    """A file of a sandbox."""

    name: str
    path: str
    type: str  # file, dir, symlink or other
    size: int
    mode: int


def _info(i):
    return FileInfo(name=i.name, path=i.path, type=i.type, size=i.size, mode=i.mode)


def _call(gw, fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except grpc.RpcError as e:
        raise errors.from_rpc(e, gw.address) from None


def _absolute(path):
    return path if path.startswith("/") else "/sandbox/" + path


class Sandbox:
    """A sandbox of a corral gateway.

    Make one with :meth:`create` (or :meth:`connect` to one that exists); use it
    in a ``with`` block to delete it at the block's end.
    """

    def __init__(self, gateway, record, owns_gateway=False):
        self._gw = gateway
        self._owns = owns_gateway
        self._record = record
        self.files = Files(self)
        self.ports = Ports(self)

    @property
    def name(self):
        return self._record.name

    @property
    def id(self):
        return self._record.id

    @property
    def phase(self):
        return self._record.phase

    @classmethod
    def create(cls, name, image=None, command=None, policy=None, labels=None, pool=None, *,
               gateway=None, wait=True, timeout=None, from_snapshot=None):
        """Create sandbox ``name`` and, unless ``wait`` is False, wait until it
        runs. ``policy`` is YAML text; ``pool`` claims a ready sandbox of that
        warm pool (then image, command and policy are the pool's);
        ``from_snapshot`` makes it from a snapshot (its files, and its image,
        command, labels and policy unless given). Without a command (nor a
        snapshot's) the sandbox keeps running, ready for :meth:`exec`."""
        owns = gateway is None
        gw = gateway or Gateway()
        if pool:
            spec = sandbox_pb2.SandboxSpec(labels=labels or {})
        elif from_snapshot:
            spec = sandbox_pb2.SandboxSpec(image=image or "", command=command or [], policy=policy or "", labels=labels or {})
        else:
            spec = sandbox_pb2.SandboxSpec(image=image or "", command=command or ["sleep", "infinity"],
                                           policy=policy or "", labels=labels or {})
        try:
            resp = _call(gw, gw.sandboxes.CreateSandbox, sandbox_pb2.CreateSandboxRequest(
                name=name, spec=spec, pool=pool or "", from_snapshot=from_snapshot or ""))
            sb = cls(gw, resp.sandbox, owns)
            if wait:
                sb.wait("running", resp.sandbox.revision, timeout=timeout)
            return sb
        except Exception:
            if owns:
                gw.close()
            raise

    @classmethod
    def connect(cls, name, *, gateway=None):
        """The sandbox ``name`` (or id) that exists."""
        owns = gateway is None
        gw = gateway or Gateway()
        try:
            return cls(gw, _call(gw, gw.sandboxes.GetSandbox, sandbox_pb2.GetSandboxRequest(name=name)), owns)
        except Exception:
            if owns:
                gw.close()
            raise

    def refresh(self):
        """Read the sandbox's record again, and return self."""
        self._record = _call(self._gw, self._gw.sandboxes.GetSandbox, sandbox_pb2.GetSandboxRequest(name=self.id))
        return self

    def wait(self, goal, since=0, timeout=None):
        """Wait until the sandbox reaches ``goal`` ("running", "stopped" or
        "deleted") after the request that returned revision ``since``."""
        req = sandbox_pb2.WaitSandboxRequest(name=self.id, goal=goal, since_revision=since)
        stream = _call(self._gw, self._gw.sandboxes.WaitSandbox, req, timeout=timeout)
        try:
            for ev in stream:
                if ev.type == "REACHED":
                    if ev.HasField("sandbox"):
                        self._record = ev.sandbox
                    return self
        except grpc.RpcError as e:
            raise errors.from_rpc(e, self._gw.address) from None
        raise errors.Unavailable("the gateway ended the wait without an answer")

    def exec(self, cmd, *, stdin=None, timeout=None, env=None, cwd=None):
        """Run ``cmd`` (a list, or a string run with ``sh -c``) in the running
        sandbox and return its output and exit code (127: no such program).
        ``timeout`` (seconds) raises :class:`corral.Timeout` past it."""
        out, err, code = [], [], None
        for kind, data in self.exec_stream(cmd, stdin=stdin, timeout=timeout, env=env, cwd=cwd):
            if kind == "stdout":
                out.append(data)
            elif kind == "stderr":
                err.append(data)
            else:
                code = data
        return ExecResult(b"".join(out).decode("utf-8", "replace"), b"".join(err).decode("utf-8", "replace"), code)

    def exec_stream(self, cmd, *, stdin=None, timeout=None, env=None, cwd=None):
        """Run ``cmd`` as :meth:`exec` does, yielding ("stdout", bytes) and
        ("stderr", bytes) as they come, then ("exit", code)."""
        argv = ["sh", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        if env:
            argv = ["env"] + [f"{k}={v}" for k, v in env.items()] + argv
        if cwd:
            argv = ["sh", "-c", 'cd "$0" && exec "$@"', cwd] + argv
        if isinstance(stdin, str):
            stdin = stdin.encode()
        requests = queue.Queue()
        requests.put(sandbox_pb2.ExecRequest(start=sandbox_pb2.ExecStart(name=self.id, command=argv, stdin=stdin is not None)))
        if stdin is not None:
            for i in range(0, len(stdin), _CHUNK):
                requests.put(sandbox_pb2.ExecRequest(stdin=stdin[i:i + _CHUNK]))
            requests.put(sandbox_pb2.ExecRequest(close_stdin=True))
        done = threading.Event()

        def send():
            while True:
                try:
                    item = requests.get(timeout=0.1)
                except queue.Empty:
                    if done.is_set():
                        return
                    continue
                yield item

        stream = _call(self._gw, self._gw.sandboxes.ExecSandbox, send(), timeout=timeout)
        try:
            for resp in stream:
                which = resp.WhichOneof("msg")
                if which == "stdout":
                    yield "stdout", resp.stdout
                elif which == "stderr":
                    yield "stderr", resp.stderr
                elif which == "exit_code":
                    yield "exit", resp.exit_code
                    return
        except grpc.RpcError as e:
            raise errors.from_rpc(e, self._gw.address) from None
        finally:
            done.set()
            stream.cancel()
        raise errors.Unavailable("the gateway ended the exec without an exit code")

    def logs(self, tail=0):
        """What the sandbox's main process printed (stdout and stderr)."""
        out = []
        for chunk in _call(self._gw, self._gw.sandboxes.SandboxLogs, sandbox_pb2.SandboxLogsRequest(name=self.id, tail=tail)):
            out.append(chunk.stdout + chunk.stderr)
        return b"".join(out).decode("utf-8", "replace")

    def stop(self, wait=True):
        """Stop the sandbox (its /sandbox stays) and wait until it is stopped."""
        self._record = _call(self._gw, self._gw.sandboxes.StopSandbox, sandbox_pb2.StopSandboxRequest(name=self.id))
        return self.wait("stopped", self._record.revision) if wait else self

    def start(self, wait=True):
        """Start the stopped sandbox and wait until it runs."""
        self._record = _call(self._gw, self._gw.sandboxes.StartSandbox, sandbox_pb2.StartSandboxRequest(name=self.id))
        return self.wait("running", self._record.revision) if wait else self

    def pause(self, wait=True, memory=False):
        """Freeze every process of the sandbox, memory kept, and wait until it
        is paused. With ``memory=True`` its processes and memory are
        checkpointed out to the gateway's disk and the memory freed instead
        (native's gVisor tier, with ``lifecycle.memory_snapshots``)."""
        self._record = _call(self._gw, self._gw.sandboxes.PauseSandbox,
                             sandbox_pb2.PauseSandboxRequest(name=self.id, memory=memory))
        return self.wait("paused", self._record.revision) if wait else self

    def resume(self, wait=True):
        """Thaw the paused sandbox (the same processes go on) and wait until
        it runs."""
        self._record = _call(self._gw, self._gw.sandboxes.ResumeSandbox, sandbox_pb2.ResumeSandboxRequest(name=self.id))
        return self.wait("running", self._record.revision) if wait else self

    def snapshot(self, name):
        """Take a snapshot ``name`` of the sandbox's /sandbox (paused for the
        instant of the copy) and return its record; make sandboxes from it
        with ``Sandbox.create(..., from_snapshot=name)``."""
        return _call(self._gw, self._gw.snapshots.CreateSnapshot,
                     snapshots_pb2.CreateSnapshotRequest(sandbox=self.id, name=name))

    def fork(self, count, name_prefix="", labels=None, wait=True):
        """Make ``count`` sandboxes from a snapshot of this one, at once, each
        with its own /sandbox, named NAME_PREFIX-1 …; wait until they run, and
        return them (on this sandbox's gateway)."""
        resp = _call(self._gw, self._gw.snapshots.ForkSandbox, snapshots_pb2.ForkSandboxRequest(
            sandbox=self.id, count=count, name_prefix=name_prefix, labels=labels or {}))
        forks = [Sandbox(self._gw, r) for r in resp.sandboxes]
        if wait:
            for f in forks:
                f.wait("running", f._record.revision)
        return forks

    def delete(self, force=False, wait=True):
        """Delete the sandbox, in any phase, and wait until it is gone."""
        resp = _call(self._gw, self._gw.sandboxes.DeleteSandbox, sandbox_pb2.DeleteSandboxRequest(name=self.id, force=force))
        if wait:
            self.wait("deleted", resp.sandbox.revision)
        if self._owns:
            self._gw.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        try:
            self.delete(force=True)
        except errors.NotFound:
            pass

    def __repr__(self):
        return f"Sandbox(name={self.name!r}, phase={self.phase!r})"


class Files:
    """A sandbox's files; a relative path is under /sandbox."""

    def __init__(self, sandbox):
        self._sb = sandbox

    @property
    def _gw(self):
        return self._sb._gw

    def read(self, path):
        """The file's content, as bytes."""
        req = files_pb2.ReadFileRequest(sandbox=self._sb.id, path=_absolute(path))
        try:
            return b"".join(c.data for c in self._gw.files.ReadFile(req))
        except grpc.RpcError as e:
            raise errors.from_rpc(e, self._gw.address) from None

    def write(self, path, data, mode=0):
        """Write the file whole (made, or replaced atomically)."""
        if isinstance(data, str):
            data = data.encode()
        header = files_pb2.WriteFileHeader(sandbox=self._sb.id, path=_absolute(path), mode=mode)

        def requests():
            yield files_pb2.WriteFileRequest(header=header)
            for i in range(0, len(data), _CHUNK):
                yield files_pb2.WriteFileRequest(data=data[i:i + _CHUNK])

        return _info(_call(self._gw, self._gw.files.WriteFile, requests()))

    def list(self, path="/sandbox"):
        """The entries of a directory."""
        resp = _call(self._gw, self._gw.files.ListDir, files_pb2.ListDirRequest(sandbox=self._sb.id, path=_absolute(path)))
        return [_info(e) for e in resp.entries]

    def stat(self, path):
        return _info(_call(self._gw, self._gw.files.StatFile, files_pb2.StatFileRequest(sandbox=self._sb.id, path=_absolute(path))))

    def remove(self, path, recursive=False):
        _call(self._gw, self._gw.files.RemoveFile, files_pb2.RemoveFileRequest(sandbox=self._sb.id, path=_absolute(path), recursive=recursive))

    def mkdir(self, path, parents=False):
        return _info(_call(self._gw, self._gw.files.MakeDir, files_pb2.MakeDirRequest(sandbox=self._sb.id, path=_absolute(path), parents=parents)))

    def watch(self, path="/sandbox"):
        """Yield (type, path) for each change in a directory of the running
        sandbox ("ready" first, once the watch is set), until closed."""
        stream = _call(self._gw, self._gw.files.WatchDir, files_pb2.WatchDirRequest(sandbox=self._sb.id, path=_absolute(path)))
        try:
            for ev in stream:
                yield ev.type, ev.path
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.CANCELLED:
                raise errors.from_rpc(e, self._gw.address) from None
        finally:
            stream.cancel()


class Ports:
    """A sandbox's ports."""

    def __init__(self, sandbox):
        self._sb = sandbox

    def expose(self, port, address=""):
        """Serve the sandbox's loopback port on the gateway's host; returns
        the address it is served at."""
        gw = self._sb._gw
        return _call(gw, gw.sandboxes.ExposePort, sandbox_pb2.ExposePortRequest(name=self._sb.id, port=port, address=address)).address

    def forward(self, port, data):
        """Send ``data`` to the sandbox's loopback port, close the sending
        side, and return everything the server answered."""
        gw = self._sb._gw
        if isinstance(data, str):
            data = data.encode()

        def frames():
            yield sandbox_pb2.PortForwardFrame(name=self._sb.id, port=port)
            for i in range(0, len(data), _CHUNK):
                yield sandbox_pb2.PortForwardFrame(data=data[i:i + _CHUNK])

        out = []
        try:
            for f in gw.sandboxes.PortForward(frames()):
                out.append(f.data)
                if f.close_write:
                    break
        except grpc.RpcError as e:
            raise errors.from_rpc(e, gw.address) from None
        return b"".join(out)


