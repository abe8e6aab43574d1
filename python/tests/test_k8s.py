"""``Sandbox.claim`` on Kubernetes, against the C++ tests' fake cluster.

``deepbox-fake-cluster`` (src/k8s/testing/fake_cluster_main.cc, built next
to ``deepbox``) runs the fake API server (the Kubernetes wire protocol over
HTTPS with a bearer token, a kubeconfig), the fake agent-sandbox controller
with a seeded warm pool, the test sandbox router (bearer token,
``X-Sandbox-*`` headers) and a real ``deepbox-sandboxd`` standing in for the
pods. The real ``deepbox`` CLI claims through its real Kubernetes client, and
the package then talks to the daemon through the router URL the CLI printed.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import selectors
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from deepbox import CLIError, Sandbox
from deepbox.sandbox import AsyncSandbox, run_cli


def _fake_cluster_bin() -> Path | None:
    deepbox = os.environ.get("DEEPBOX_BIN")
    if not deepbox:
        return None
    p = Path(deepbox).parent / "deepbox-fake-cluster"
    return p if p.is_file() else None


@pytest.fixture(scope="module")
def cluster() -> Iterator[dict[str, Any]]:
    """The fake cluster's coordinates (one JSON line from deepbox-fake-cluster)."""
    exe = _fake_cluster_bin()
    if exe is None:
        pytest.skip(
            "deepbox-fake-cluster was not found next to the deepbox binary "
            "(cmake --build BUILD_DIR --target deepbox-fake-cluster)"
        )
    work = tempfile.mkdtemp(prefix="deepbox-pytest-k8s-")
    err = open(os.path.join(work, "stderr"), "w+")  # noqa: SIM115 (closed below)
    proc = subprocess.Popen([str(exe), "--dir", work], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err)
    try:
        assert proc.stdout is not None
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        # A safety net against a hang, not a timed assertion.
        ready = sel.select(timeout=120)
        line = proc.stdout.readline() if ready else b""
        if not line:
            err.seek(0)
            pytest.fail(f"deepbox-fake-cluster did not start (exit {proc.poll()}): {err.read()[-2000:]}")
        info = json.loads(line)
        info["work"] = work
        yield info
    finally:
        # Closing its stdin stops it (the daemon and servers go with it).
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        err.close()
        shutil.rmtree(work, ignore_errors=True)


def _claim(cluster: dict[str, Any], **kwargs: Any) -> Sandbox:
    args: dict[str, Any] = {
        "kubeconfig": cluster["kubeconfig"],
        "router_url": cluster["router_url"],
        "router_token": cluster["router_token"],
        "labels": {"deepbox.test/python": "k8s"},
        "ttl": 600,
        "ready_timeout": 60,
    }
    args.update(kwargs)
    return Sandbox.claim(**args)


def _claims(cluster: dict[str, Any], namespace: str = "default") -> list[str]:
    out = run_cli(["sandbox", "ls", "--provider", "k8s", "--kubeconfig", cluster["kubeconfig"], "--namespace", namespace, "--json"])
    items = json.loads(out)
    return [str(i.get("metadata", {}).get("name")) for i in items]


def _same_message(ours: str, stderr: str) -> bool:
    """Whether the raised message is what the CLI printed (claim names are random per run)."""
    mask = lambda t: re.sub(r"sandbox-claim-[0-9a-z]+", "sandbox-claim-*", t)  # noqa: E731
    return mask(ours) in mask(stderr)


def test_claim_uses_the_daemon_through_the_router_and_deletes(cluster: dict[str, Any]) -> None:
    from deepbox.deepagents import DeepboxSandbox

    sb = _claim(cluster)
    try:
        assert sb.provider == "k8s"
        ns, _, claim = sb.id.partition("/")
        assert ns == cluster["namespace"] and claim
        assert sb.meta["warm_pool"] == cluster["warm_pool"]
        assert sb.meta["url"] == cluster["router_url"]
        # The router routes by the claim's coordinates, sent on every request.
        assert any(k.lower().startswith("x-sandbox-") for k in sb.meta["headers"])
        assert claim in _claims(cluster)

        r = sb.exec("echo hello from the pod; echo oops >&2; exit 3")
        assert r.exit_code == 3
        assert r.stdout == b"hello from the pod\n" and r.stderr == b"oops\n"

        backend = DeepboxSandbox(sb)
        root = backend.root
        assert root == cluster["daemon_root"]  # the "pod" is this daemon
        w = backend.write(f"{root}/k8s/notes.py", "x = 1\nneedle = 2\n")
        assert not w.error, w.error
        assert Path(cluster["daemon_root"], "k8s", "notes.py").read_text() == "x = 1\nneedle = 2\n"
        rd = backend.read(f"{root}/k8s/notes.py")
        assert not rd.error and "needle = 2" in str(rd.file_data["content"] if rd.file_data else "")
        ed = backend.edit(f"{root}/k8s/notes.py", "needle = 2", "needle = 3")
        assert not ed.error, ed.error
        ls = backend.ls(f"{root}/k8s")
        assert [e["path"] for e in ls.entries or []] == [f"{root}/k8s/notes.py"]
        gr = backend.grep("needle", f"{root}/k8s")
        assert [(m["path"], m["line"], m["text"]) for m in gr.matches or []] == [
            (f"{root}/k8s/notes.py", 2, "needle = 3")
        ]
        gl = backend.glob("**/*.py", f"{root}/k8s")
        assert [m["path"] for m in gl.matches or []] == [f"{root}/k8s/notes.py"]
        ex = backend.execute("cat k8s/notes.py | wc -l")
        assert ex.exit_code == 0 and ex.output.strip() == "2"
    finally:
        sb.delete()
    assert sb.deleted
    assert claim not in _claims(cluster)
    sb.delete()  # idempotent


def test_context_manager_and_async_claim(cluster: dict[str, Any]) -> None:
    with _claim(cluster) as sb:
        claim = sb.id.partition("/")[2]
        assert sb.exec(["true"]).exit_code == 0
    assert sb.deleted and claim not in _claims(cluster)

    async def run() -> str:
        a = await AsyncSandbox.claim(
            kubeconfig=cluster["kubeconfig"],
            router_url=cluster["router_url"],
            router_token=cluster["router_token"],
            ready_timeout=60,
        )
        try:
            r = await a.exec("printf async")
            assert r.stdout == b"async"
            return str(a.id)
        finally:
            await a.delete()

    sid = asyncio.run(run())
    assert sid.partition("/")[2] not in _claims(cluster)


def test_a_missing_warm_pool_is_the_clis_error(cluster: dict[str, Any]) -> None:
    with pytest.raises(CLIError) as e:
        _claim(cluster, warm_pool="no-such-pool")
    # What `deepbox sandbox create` itself says and exits with.
    argv = e.value.argv
    direct = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    assert direct.returncode == e.value.exit_code != 0
    assert _same_message(e.value.message, direct.stderr)
    assert "SandboxWarmPool 'no-such-pool' does not exist in namespace 'default'" in e.value.message
    assert _claims(cluster) == []  # nothing left behind


def test_a_namespace_without_the_pool_is_the_clis_error(cluster: dict[str, Any]) -> None:
    with pytest.raises(CLIError) as e:
        _claim(cluster, namespace="elsewhere")
    direct = subprocess.run(e.value.argv, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    assert direct.returncode == e.value.exit_code != 0
    assert _same_message(e.value.message, direct.stderr)
    assert f"SandboxWarmPool '{cluster['warm_pool']}' does not exist in namespace 'elsewhere'" in e.value.message


def test_a_wrong_router_token_is_refused(cluster: dict[str, Any]) -> None:
    sb = _claim(cluster)
    try:
        from deepbox import DeepboxError

        bad = Sandbox.attach(sb.id, url=sb.meta["url"], token="wrong", headers=sb.meta["headers"])
        with pytest.raises(DeepboxError):
            bad.exec(["true"])
    finally:
        sb.delete()


def test_snapshot_claim_from_it_and_fork(cluster: dict[str, Any]) -> None:
    # One daemon stands in for every pod here: this checks the calls, not
    # that the files are apart (the C++ contract tests do).
    sb = _claim(cluster)
    made: list[Sandbox] = []
    try:
        sb.write("snap/kept.txt", b"kept\n")
        snap = sb.snapshot(name="py-k8s-snap")
        assert snap["provider"] == "k8s" and snap["source_id"] == sb.id
        assert any(s["name"] == "py-k8s-snap" for s in Sandbox.snapshots())
        restored = _claim(cluster, from_snapshot="py-k8s-snap")
        made.append(restored)
        assert restored.id != sb.id
        assert restored.read("snap/kept.txt").content == "kept\n"
        forks = sb.fork(2, ttl=600, labels={"deepbox.test/python": "k8s"})
        made.extend(forks)
        assert len(forks) == 2 and all(f.provider == "k8s" for f in forks)
        assert all(f.read("snap/kept.txt").content == "kept\n" for f in forks)
        # The fork's copy is not left behind as a snapshot.
        assert [s["name"] for s in Sandbox.snapshots()] == ["py-k8s-snap"]
    finally:
        for m in made:
            m.delete()
        sb.delete()
        Sandbox.delete_snapshot("py-k8s-snap")
    assert Sandbox.snapshots() == []
