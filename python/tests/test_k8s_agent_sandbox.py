"""The upstream Python SDK (PyPI ``k8s-agent-sandbox``, pinned) as a client of deepbox-sandboxd.

Every call of the SDK's ``Sandbox``/``AsyncSandbox`` handles that talks to
the sandbox runtime, with the SDK's own HTTP code, against a real
``deepbox-sandboxd`` on loopback, in both runtimes the SDK speaks:

- the legacy python-runtime API (``SandboxDirectConnectionConfig``, the SDK's
  router default): ``commands.run`` (with ``command_timeout``),
  ``files.write`` (bytes, text, a streamed binary file), ``read``,
  ``read_to`` (a streamed download, with ``max_bytes``), ``list``,
  ``exists``; and through the fake cluster's sandbox router, the way a
  claimed sandbox is reached;
- the sandboxd runtime (``SandboxdInClusterConnectionConfig``, pod IP
  127.0.0.1): files over the REST API (``PUT``/``GET``/``HEAD``/``DELETE
  /v1/files/...``), including a streamed upload and download and
  ``delete``; ``commands.run`` there is gRPC ``ProcessService/Execute``
  (cleartext HTTP/2 on the daemon's own port), with ``env``, ``cwd`` and a
  ``command_timeout`` (the call's deadline).

Only the Kubernetes lookups the handle makes (the Sandbox object's pod IP)
are answered by a stand-in; no cluster API is needed for the runtime calls.
"""

from __future__ import annotations

import asyncio
import io
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("k8s_agent_sandbox")

from k8s_agent_sandbox.async_sandbox import AsyncSandbox  # noqa: E402
from k8s_agent_sandbox.exceptions import SandboxRequestError  # noqa: E402
from k8s_agent_sandbox.models import (  # noqa: E402
    SandboxDirectConnectionConfig,
    SandboxdInClusterConnectionConfig,
)
from k8s_agent_sandbox.sandbox import Sandbox  # noqa: E402

from test_k8s import cluster  # noqa: E402,F401 (the fake cluster fixture)


class NoCluster:
    """The Kubernetes lookups of a handle: the Sandbox object and its pod IP."""

    injected_api_client = None

    def __init__(self, pod_ips: list[str] | None = None) -> None:
        self.pod_ips = pod_ips or ["127.0.0.1"]

    def get_sandbox(self, name: str, namespace: str) -> dict[str, Any]:
        return {"metadata": {"name": name}, "status": {"podIPs": self.pod_ips}}

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"unexpected Kubernetes call {name}")


class AsyncNoCluster(NoCluster):
    async def get_sandbox(self, name: str, namespace: str) -> dict[str, Any]:  # type: ignore[override]
        return NoCluster.get_sandbox(self, name, namespace)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def daemon() -> Iterator[dict[str, Any]]:
    """A real deepbox-sandboxd on 127.0.0.1, its root a fresh directory."""
    exe = os.environ.get("DEEPBOX_SANDBOXD")
    if not exe or not Path(exe).is_file():
        pytest.skip("deepbox-sandboxd was not found (DEEPBOX_SANDBOXD or DEEPBOX_BUILD_DIR/bin)")
    work = Path(tempfile.mkdtemp(prefix="deepbox-pytest-sdk-"))
    root = work / "root"
    root.mkdir()
    port = _free_port()
    log = open(work / "log", "w+")  # noqa: SIM115 (closed below)
    proc = subprocess.Popen([exe, "--listen", f"127.0.0.1:{port}", "--root-dir", str(root)], stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 30  # a safety net against a hang, not a timed assertion
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    pytest.fail(f"deepbox-sandboxd did not start: {log.read()[-2000:]}")
                time.sleep(0.05)
        yield {"url": f"http://127.0.0.1:{port}", "port": port, "root": root}
    finally:
        proc.terminate()
        proc.wait()
        log.close()
        shutil.rmtree(work, ignore_errors=True)


def _legacy(url: str, **config: Any) -> Sandbox:
    return Sandbox(
        claim_name="sandbox-claim-test",
        sandbox_id="sandbox-test",
        connection_config=SandboxDirectConnectionConfig(api_url=url, **config),
        k8s_helper=NoCluster(),
    )


def _sandboxd(port: int) -> Sandbox:
    return Sandbox(
        claim_name="sandbox-claim-test",
        sandbox_id="sandbox-test",
        connection_config=SandboxdInClusterConnectionConfig(
            mode="in-cluster-pod-ip", rest_port=port, grpc_port=_free_port()
        ),
        k8s_helper=NoCluster(),
    )


@pytest.fixture
def legacy(daemon: dict[str, Any]) -> Iterator[Sandbox]:
    sb = _legacy(daemon["url"])
    yield sb
    sb.close_connection()


@pytest.fixture
def sandboxd(daemon: dict[str, Any]) -> Iterator[Sandbox]:
    sb = _sandboxd(daemon["port"])
    yield sb
    sb.close_connection()


BLOB = bytes(range(256)) * 4096  # 1 MiB, every byte value


class Chunks(io.RawIOBase):
    """A binary file object the SDK reads in chunks (its streamed upload)."""

    def __init__(self, data: bytes) -> None:
        self._data = io.BytesIO(data)

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        return self._data.read(n)


# ---- legacy python-runtime API ------------------------------------------------------------


def test_legacy_commands_run(legacy: Sandbox) -> None:
    r = legacy.commands.run("echo 'Hello from SDK'")
    assert (r.stdout, r.stderr, r.exit_code, r.timed_out) == ("Hello from SDK\n", "", 0, False)
    r = legacy.commands.run("sh -c 'echo oops >&2; exit 3'")
    assert (r.stderr, r.exit_code) == ("oops\n", 3)


def test_legacy_commands_run_timeout(legacy: Sandbox, daemon: dict[str, Any]) -> None:
    import json
    import urllib.request

    probe = urllib.request.Request(
        daemon["url"] + "/execute", data=b'{"command":"true"}', headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(probe, timeout=30) as resp:
        if "timed_out" not in json.loads(resp.read()):
            pytest.skip("this deepbox-sandboxd predates timeout_seconds on /execute (the SDK's command_timeout)")
    r = legacy.commands.run("sleep 30", command_timeout=1)
    assert r.timed_out and r.exit_code != 0


def test_legacy_files_write_read(legacy: Sandbox, daemon: dict[str, Any]) -> None:
    legacy.files.write("sdk/hello.txt", b"written by the upstream SDK\n")
    assert (daemon["root"] / "sdk/hello.txt").read_bytes() == b"written by the upstream SDK\n"
    assert legacy.files.read("sdk/hello.txt") == b"written by the upstream SDK\n"
    legacy.files.write("sdk/text.txt", "héllo")
    assert legacy.files.read("/sdk/text.txt") == "héllo".encode()
    legacy.files.write("sdk/blob.bin", BLOB)
    assert legacy.files.read("sdk/blob.bin") == BLOB


def test_legacy_streamed_upload_and_download(legacy: Sandbox, daemon: dict[str, Any]) -> None:
    legacy.files.write("sdk/stream.bin", Chunks(BLOB * 3))
    assert (daemon["root"] / "sdk/stream.bin").read_bytes() == BLOB * 3
    sink = io.BytesIO()
    assert legacy.files.read_to("sdk/stream.bin", sink) == len(BLOB) * 3
    assert sink.getvalue() == BLOB * 3
    with pytest.raises(RuntimeError, match="exceeds limit"):
        legacy.files.read_to("sdk/stream.bin", io.BytesIO(), max_bytes=1000)


def test_legacy_files_list_exists(legacy: Sandbox) -> None:
    legacy.files.write("listing/a.txt", b"a")
    legacy.files.write("listing/sub/b.txt", b"bb")
    entries = {e.name: e for e in legacy.files.list("listing")}
    assert sorted(entries) == ["a.txt", "sub"]
    assert entries["a.txt"].type == "file" and entries["a.txt"].size == 1
    assert entries["sub"].type == "directory"
    assert legacy.files.exists("listing/a.txt") is True
    assert legacy.files.exists("listing/nope.txt") is False


def test_legacy_errors(legacy: Sandbox) -> None:
    with pytest.raises(SandboxRequestError) as e:
        legacy.files.read("nope/missing.txt")
    assert e.value.status_code == 404
    with pytest.raises(SandboxRequestError) as e:
        legacy.files.write("../escape.txt", b"x", allow_unsafe_paths=True)
    assert e.value.status_code == 403
    # The SDK's own checks (no request is sent).
    with pytest.raises(ValueError):
        legacy.files.write("../escape.txt", b"x")
    with pytest.raises(NotImplementedError):
        legacy.files.delete("listing/a.txt")


def test_legacy_async(daemon: dict[str, Any]) -> None:
    async def run() -> None:
        sb = AsyncSandbox(
            claim_name="sandbox-claim-test",
            sandbox_id="sandbox-test",
            connection_config=SandboxDirectConnectionConfig(api_url=daemon["url"]),
            k8s_helper=AsyncNoCluster(),
        )
        try:
            r = await sb.commands.run("echo async")
            assert (r.stdout, r.exit_code) == ("async\n", 0)
            await sb.files.write("async/one.bin", BLOB)
            assert await sb.files.read("async/one.bin") == BLOB
            assert [e.name for e in await sb.files.list("async")] == ["one.bin"]
            assert await sb.files.exists("async/one.bin") is True
            assert await sb.files.exists("async/two.bin") is False
        finally:
            await sb.close_connection()

    asyncio.run(run())


def test_legacy_through_the_fake_clusters_router(cluster: dict[str, Any]) -> None:  # noqa: F811
    """A claimed sandbox, reached the SDK's way: the router and its bearer token,
    the SDK's X-Sandbox-* routing headers (its pod IP from the Sandbox's status),
    and the claim's own daemon token as an extra header."""
    from deepbox import Sandbox as DeepboxSandbox

    claim = DeepboxSandbox.claim(
        kubeconfig=cluster["kubeconfig"], router_url=cluster["router_url"], router_token=cluster["router_token"],
        labels={"deepbox.test/python": "k8s-sdk"}, ttl=600, ready_timeout=60,
    )
    try:
        headers = claim.meta["headers"]
        sb = Sandbox(
            claim_name=claim.meta["claim"],
            sandbox_id=headers["X-Sandbox-ID"],
            namespace=headers["X-Sandbox-Namespace"],
            connection_config=SandboxDirectConnectionConfig(
                api_url=cluster["router_url"],
                extra_headers={
                    "Authorization": f"Bearer {cluster['router_token']}",
                    "X-Sandboxd-Token": headers["X-Sandboxd-Token"],
                },
            ),
            # The pod IP the SDK reads from the Sandbox's status and sends in X-Sandbox-Pod-IP.
            k8s_helper=NoCluster(claim.meta["pod_ips"]),
        )
        try:
            r = sb.commands.run("echo routed")
            assert (r.stdout, r.exit_code) == ("routed\n", 0)
            sb.files.write("routed/file.bin", BLOB)
            assert sb.files.read("routed/file.bin") == BLOB
            assert [e.name for e in sb.files.list("routed")] == ["file.bin"]
        finally:
            sb.close_connection()
    finally:
        claim.delete()


# ---- sandboxd runtime (REST files; gRPC process service) -------------------------------------


def test_sandboxd_files_write_read_stream(sandboxd: Sandbox, daemon: dict[str, Any]) -> None:
    sandboxd.files.write("v1/hello.txt", b"over PUT /v1/files\n")
    assert (daemon["root"] / "v1/hello.txt").read_bytes() == b"over PUT /v1/files\n"
    assert sandboxd.files.read("v1/hello.txt") == b"over PUT /v1/files\n"
    sandboxd.files.write("v1/stream.bin", Chunks(BLOB * 2))  # a chunked PUT body
    assert (daemon["root"] / "v1/stream.bin").read_bytes() == BLOB * 2
    sink = io.BytesIO()
    assert sandboxd.files.read_to("v1/stream.bin", sink) == 2 * len(BLOB)
    assert sink.getvalue() == BLOB * 2
    with pytest.raises(RuntimeError, match="exceeds limit"):
        sandboxd.files.read_to("v1/stream.bin", io.BytesIO(), max_bytes=10)


def test_sandboxd_files_list_exists_delete(sandboxd: Sandbox, daemon: dict[str, Any]) -> None:
    sandboxd.files.write("v1tree/a.txt", b"a")
    sandboxd.files.write("v1tree/sub/b.txt", b"bb")
    entries = {e.name: e for e in sandboxd.files.list("v1tree")}
    assert sorted(entries) == ["a.txt", "sub"]
    assert entries["a.txt"].type == "file" and entries["a.txt"].size == 1
    assert entries["sub"].type == "directory"
    assert sandboxd.files.exists("v1tree/a.txt") is True
    assert sandboxd.files.exists("v1tree/none") is False
    sandboxd.files.delete("v1tree/a.txt")
    assert not (daemon["root"] / "v1tree/a.txt").exists()
    with pytest.raises(SandboxRequestError) as e:
        sandboxd.files.delete("v1tree")  # not empty, not recursive
    assert e.value.status_code == 409
    sandboxd.files.delete("v1tree", recursive=True)
    assert not (daemon["root"] / "v1tree").exists()
    with pytest.raises(SandboxRequestError) as e:
        sandboxd.files.read("v1tree/sub/b.txt")
    assert e.value.status_code == 404


def test_sandboxd_async_files(daemon: dict[str, Any]) -> None:
    async def run() -> None:
        sb = AsyncSandbox(
            claim_name="sandbox-claim-test",
            sandbox_id="sandbox-test",
            connection_config=SandboxdInClusterConnectionConfig(
                mode="in-cluster-pod-ip", rest_port=daemon["port"], grpc_port=_free_port()
            ),
            k8s_helper=AsyncNoCluster(),
        )
        try:
            await sb.files.write("v1async/x.bin", BLOB)
            assert await sb.files.read("v1async/x.bin") == BLOB
            assert [e.name for e in await sb.files.list("v1async")] == ["x.bin"]
            assert await sb.files.exists("v1async/x.bin") is True
            await sb.files.delete("v1async", recursive=True)
            assert await sb.files.exists("v1async") is False
        finally:
            await sb.close_connection()

    asyncio.run(run())


def _grpc_sandbox(port: int) -> Sandbox:
    return Sandbox(
        claim_name="sandbox-claim-test",
        sandbox_id="sandbox-test",
        # gRPC on the daemon's own port: every listener of deepbox-sandboxd
        # also speaks gRPC over cleartext HTTP/2.
        connection_config=SandboxdInClusterConnectionConfig(
            mode="in-cluster-pod-ip", rest_port=_free_port(), grpc_port=port
        ),
        k8s_helper=NoCluster(),
    )


def test_sandboxd_commands_run_over_grpc(daemon: dict[str, Any]) -> None:
    sb = _grpc_sandbox(daemon["port"])
    try:
        r = sb.commands.run("echo grpc", timeout=10)
        assert (r.stdout, r.stderr, r.exit_code) == ("grpc\n", "", 0)
        r = sb.commands.run("printf out; printf err >&2; exit 3", timeout=10)
        assert (r.stdout, r.stderr, r.exit_code) == ("out", "err", 3)
        (daemon["root"] / "grpcdir").mkdir(exist_ok=True)
        r = sb.commands.run('pwd; printf "$GREETING"', timeout=10, env={"GREETING": "hi"}, cwd="grpcdir")
        assert r.stdout == f"{daemon['root'].resolve() / 'grpcdir'}\nhi"
        assert r.exit_code == 0
    finally:
        sb.close_connection()


def test_sandboxd_command_timeout_over_grpc(daemon: dict[str, Any]) -> None:
    """command_timeout is the call's gRPC deadline; the daemon kills the command at it."""
    sb = _grpc_sandbox(daemon["port"])
    marker = daemon["root"] / "grpc-timeout-pid"
    try:
        r = sb.commands.run(f"echo $$ > {marker}; exec sleep 30", timeout=10, command_timeout=1)
        assert (r.exit_code, r.timed_out) == (124, True)
        pid = int(marker.read_text())
        deadline = time.monotonic() + 30  # a safety net, not a timed assertion
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not Path(f"/proc/{pid}").exists(), "the timed-out command still runs"
    finally:
        sb.close_connection()


def test_sandboxd_async_commands_over_grpc(daemon: dict[str, Any]) -> None:
    """AsyncSandbox's commands.run: grpc.aio against the same daemon, calls at once."""

    async def run() -> None:
        sb = AsyncSandbox(
            claim_name="sandbox-claim-test",
            sandbox_id="sandbox-test",
            connection_config=SandboxdInClusterConnectionConfig(
                mode="in-cluster-pod-ip", rest_port=_free_port(), grpc_port=daemon["port"]
            ),
            k8s_helper=AsyncNoCluster(),
        )
        try:
            results = await asyncio.gather(
                *(sb.commands.run(f"echo async{i}; exit {i}", timeout=10) for i in range(4))
            )
            assert [(r.stdout, r.exit_code) for r in results] == [(f"async{i}\n", i) for i in range(4)]
            r = await sb.commands.run("exec sleep 30", timeout=10, command_timeout=1)
            assert (r.exit_code, r.timed_out) == (124, True)
        finally:
            await sb.close_connection()

    asyncio.run(run())
