"""The real deepagents-code (dcode, from PyPI) runs a deepbox sandbox through the plugin.

dcode pins another deepagents than the main test venv, so it lives in its
own venv (``$DCODE_VENV``, made by python/run-tests.sh); these tests drive
that venv's python and its ``dcode``.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from conftest import REPO

VENV = os.environ.get("DCODE_VENV")
# dcode's own deterministic test model (no network), selected by a config class_path.
MODELS_TOML = (
    "[models.providers.itest]\n"
    'class_path = "deepagents_code._testing_models:ToolCallingIntegrationChatModel"\n'
    'models = ["fake"]\n'
)


def readme_dcode_config() -> str:
    """The dcode configuration python/README.md gives (between its dcode-config markers)."""
    readme = (REPO / "python" / "README.md").read_text(encoding="utf-8")
    m = re.search(r"<!-- dcode-config -->\s*```toml\n(.*?)```\s*<!-- /dcode-config -->", readme, re.S)
    assert m, "python/README.md has no dcode-config block"
    return m.group(1)

SCRIPT = r"""
import json, sys
from deepagents_code.integrations.sandbox_registry import SandboxRegistry
from deepagents_code.integrations.sandbox_factory import create_sandbox, get_default_working_dir, verify_sandbox_deps

reg = SandboxRegistry()
meta = reg.get_metadata("deepbox")
verify_sandbox_deps("deepbox")
out = {"providers": reg.available_providers(), "working_dir": get_default_working_dir("deepbox"),
       "supports_sandbox_id": meta.supports_sandbox_id}
with create_sandbox("deepbox") as backend:
    out["id"] = backend.id
    out["classes"] = [c.__name__ for c in type(backend).__mro__]
    r = backend.execute("pwd; id -u")
    out["execute"] = [r.output, r.exit_code]
    out["write"] = backend.write("/workspace/hello.txt", "from dcode").error
    out["read"] = backend.read("/workspace/hello.txt").file_data["content"]
    out["glob"] = [m["path"] for m in backend.glob("*.txt").matches]
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def dcode_python() -> str:
    if not VENV:
        pytest.skip("DCODE_VENV is not set (python/run-tests.sh makes the dcode venv; SKIP_DCODE=1 skips it)")
    py = Path(VENV) / "bin" / "python"
    if not py.is_file():
        pytest.skip(f"no python in DCODE_VENV={VENV}")
    return str(py)


def test_dcode_is_the_pypi_release(dcode_python: str) -> None:
    out = subprocess.run(
        [dcode_python, "-c", "import importlib.metadata as m; print(m.version('deepagents-code'), m.version('deepagents'))"],
        capture_output=True, text=True, check=True,
    )
    code_version, da_version = out.stdout.split()
    assert code_version == "0.1.57" and da_version.startswith("0.7.")


def test_dcode_runs_a_deepbox_sandbox_through_the_plugin(dcode_python: str, deepbox_bin: str) -> None:
    p = subprocess.run([dcode_python, "-c", SCRIPT], capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert "deepbox" in out["providers"]
    assert out["working_dir"] == "/workspace" and out["supports_sandbox_id"]
    assert "DeepboxSandbox" in out["classes"]
    assert out["execute"] == ["/workspace\n1000\n", 0]
    assert out["write"] is None and out["read"] == "from dcode"
    assert out["glob"] == ["/workspace/hello.txt"]
    # dcode deleted the sandbox it created on exit.
    ls = subprocess.run([deepbox_bin, "sandbox", "ls", "-q"], capture_output=True, text=True, check=True)
    assert out["id"] not in ls.stdout


INTERFACE_SCRIPT = r"""
import asyncio, inspect, json
from deepagents_code.integrations import sandbox_provider as sp
from deepbox.dcode import DeepboxProvider, SandboxNotFoundError

out = {}
out["subclass"] = issubclass(DeepboxProvider, sp.SandboxProvider)
out["abstract_left"] = sorted(getattr(DeepboxProvider, "__abstractmethods__", ()))
out["same_not_found"] = SandboxNotFoundError is sp.SandboxNotFoundError
def kwonly(fn):
    return sorted(n for n, p in inspect.signature(fn).parameters.items() if p.kind is p.KEYWORD_ONLY)
out["signatures"] = {name: kwonly(getattr(DeepboxProvider, name)) == kwonly(getattr(sp.SandboxProvider, name))
                     for name in ("get_or_create", "delete", "aget_or_create", "adelete")}
provider = DeepboxProvider(labels={"deepbox.test/python": "provider-dcode"})
meta = provider.metadata
out["metadata"] = [type(meta).__name__, meta.name, meta.working_dir, meta.supports_sandbox_id]
try:
    provider.get_or_create(sandbox_id="sb-000000000000")
except sp.SandboxError as e:  # dcode catches its own base class
    out["missing"] = type(e).__name__
async def run():
    backend = await provider.aget_or_create()
    r = await backend.aexecute("echo through dcode")
    out["aexecute"] = [r.output, r.exit_code]
    out["listed"] = [i["sandbox_id"] for i in provider.list()["items"]] == [backend.id]
    await provider.adelete(sandbox_id=backend.id)
    await provider.adelete(sandbox_id=backend.id)
    out["empty_after"] = provider.list()["items"] == []
asyncio.run(run())
print(json.dumps(out))
"""


def test_provider_implements_dcodes_interface(dcode_python: str, deepbox_bin: str) -> None:
    """dcode's own SandboxProvider ABC: nothing abstract left, the same keyword-only
    signatures, dcode's SandboxNotFoundError (a SandboxError dcode catches) for a
    missing id, and dcode's async wrappers driving a real sandbox."""
    p = subprocess.run([dcode_python, "-c", INTERFACE_SCRIPT], capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["subclass"] and out["abstract_left"] == [] and out["same_not_found"]
    assert out["signatures"] == {"get_or_create": True, "delete": True, "aget_or_create": True, "adelete": True}
    assert out["metadata"] == ["SandboxProviderMetadata", "deepbox", "/workspace", True]
    assert out["missing"] == "SandboxNotFoundError"
    assert out["aexecute"] == ["through dcode\n", 0]
    assert out["listed"] and out["empty_after"]


def test_dcode_cli_lists_the_provider(dcode_python: str) -> None:
    dcode = str(Path(dcode_python).parent / "dcode")
    p = subprocess.run([dcode, "--help"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0
    assert "--sandbox" in p.stdout


def test_dcode_headless_runs_its_tools_in_a_deepbox_sandbox(dcode_python: str, deepbox_bin: str, tmp_path: Path) -> None:
    """``dcode -n ... --sandbox deepbox``: dcode's own test model (selected by a
    config ``class_path``, no network) calls write_file, which lands in the sandbox."""
    from deepbox import Sandbox

    env, project = _dcode_env(dcode_python, tmp_path, MODELS_TOML)
    with Sandbox.create(labels={"deepbox.test/python": "dcode"}, ttl=900, network="none") as sb:
        p = subprocess.run(
            ["dcode", "-n", "DCA_TEST_WRITE_FILE=/workspace/from-dcode.txt", "-M", "itest:fake",
             "--sandbox", "deepbox", "--sandbox-id", sb.id],
            cwd=project, env=env, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL,
        )
        assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
        assert sb.read_text("/workspace/from-dcode.txt") == "auto-approved"
        assert sb.exec("true").ok  # an attached sandbox is not deleted by dcode


def _dcode_env(dcode_python: str, tmp_path: Path, config: str) -> tuple[dict[str, str], Path]:
    home = tmp_path / "home"
    (home / ".deepagents").mkdir(parents=True)
    (home / ".deepagents" / "config.toml").write_text(config)
    project = tmp_path / "project"
    project.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.update(HOME=str(home), DEEPAGENTS_CODE_NO_UPDATE_CHECK="1")
    env["PATH"] = f"{Path(dcode_python).parent}:{env.get('PATH', '')}"
    return env, project


def _sandboxes(deepbox_bin: str) -> list[dict]:
    out = subprocess.run([deepbox_bin, "sandbox", "ls", "--json"], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def _ours(deepbox_bin: str) -> list[dict]:
    """The sandboxes dcode's provider made (its label), not the other tests'."""
    return [m for m in _sandboxes(deepbox_bin) if (m.get("labels") or {}).get("deepagents-code/sandbox") == "true"]


def _wait(what: str, cond, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not cond():
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {seconds:g} s")
        time.sleep(0.2)


def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def test_readme_config_dcode_deletes_the_sandbox_it_created(dcode_python: str, deepbox_bin: str, tmp_path: Path) -> None:
    """``dcode -n ... --sandbox deepbox`` with the README's configuration (no
    ``--sandbox-id``): dcode starts, the tool runs in a sandbox of the README's
    network, and no sandbox is left once dcode has exited (it leaked every time:
    dcode SIGKILLs its server before the provider's delete runs)."""
    assert not _ours(deepbox_bin), "a dcode sandbox of an earlier test is still there"
    env, project = _dcode_env(dcode_python, tmp_path, readme_dcode_config() + "\n" + MODELS_TOML)
    seen: dict[str, dict] = {}
    stop = threading.Event()

    def spy() -> None:  # the sandboxes that exist while dcode runs
        while not stop.is_set():
            seen.update((m["id"], m) for m in _ours(deepbox_bin))
            stop.wait(0.2)

    t = threading.Thread(target=spy, daemon=True)
    t.start()
    try:
        p = subprocess.run(
            ["dcode", "-n", "DCA_TEST_WRITE_FILE=/workspace/from-dcode.txt", "-M", "itest:fake", "--sandbox", "deepbox"],
            cwd=project, env=env, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL,
        )
    finally:
        stop.set()
        t.join()
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    assert len(seen) == 1, seen
    (meta,) = seen.values()
    assert meta["network"] == "none"  # the README's params reached the provider
    _wait(f"sandbox {meta['id']} (dcode's) is deleted", lambda: not _ours(deepbox_bin), 120)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["sigint", "sigkill"])
def test_dcode_interrupted_or_killed_leaves_no_sandbox(
    dcode_python: str, deepbox_bin: str, tmp_path: Path, sig: signal.Signals
) -> None:
    """Ctrl-C (SIGINT) or a crash (SIGKILL) of dcode while its sandbox is busy:
    the sandbox is deleted all the same. A setup script keeps dcode busy in the
    sandbox (``--sandbox-setup``) until the signal."""
    from deepbox import Sandbox

    assert not _ours(deepbox_bin), "a dcode sandbox of an earlier test is still there"
    env, project = _dcode_env(dcode_python, tmp_path, readme_dcode_config() + "\n" + MODELS_TOML)
    setup = tmp_path / "setup.sh"
    setup.write_text("echo started > /workspace/setup.started\nsleep 600\n")
    p = subprocess.Popen(
        ["dcode", "-n", "DCA_TEST_WRITE_FILE=/workspace/x.txt", "-M", "itest:fake", "--sandbox", "deepbox",
         "--sandbox-setup", str(setup)],
        cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL,
    )
    servers: list[int] = []
    try:
        def busy() -> bool:
            if p.poll() is not None:
                pytest.fail(f"dcode ended early ({p.returncode}): {p.stdout.read()[-3000:] if p.stdout else ''}")
            mine = _ours(deepbox_bin)
            return bool(mine) and Sandbox.attach(mine[0]["id"]).exists("/workspace/setup.started")

        _wait("dcode's sandbox runs the setup script", busy, 400)
        sid = _ours(deepbox_bin)[0]["id"]
        servers = _children(p.pid)  # dcode's langgraph server, which a SIGKILL of dcode leaves running
        p.send_signal(sig)
        p.wait(timeout=120)
        _wait(f"sandbox {sid} is deleted after {sig.name} of dcode", lambda: not _ours(deepbox_bin), 120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        for pid in servers:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if p.stdout:
            p.stdout.close()


REAPER_CHILD = r"""
import sys, time
from deepbox.dcode import _Reaper
r = _Reaper(sys.argv[1], sys.argv[2])
if sys.argv[3] == "done":
    r.done()
print("ready", flush=True)
time.sleep(600)
"""


def _reapers_of(sandbox_id: str) -> list[int]:
    pids = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if b"deepbox._reaper" in argv and sandbox_id.encode() in argv:
            pids.append(int(cmdline.parent.name))
    return pids


@pytest.mark.parametrize("how", ["killed", "done"])
def test_the_watcher_deletes_the_sandbox_when_its_creator_dies(tmp_path: Path, how: str) -> None:
    """The provider's watcher (deepbox._reaper), with a stand-in deepbox that logs
    its arguments: SIGKILL of the creating process -> one `sandbox rm ID`;
    after the provider's own delete (done) -> none, and the watcher is gone."""
    pytest.importorskip("deepagents")
    import sys

    calls = tmp_path / "calls.log"
    fake = tmp_path / "deepbox"
    fake.write_text(f'#!/bin/sh\necho "$@" >> {calls}\n')
    fake.chmod(0o755)
    sid = f"sb-reaper{how}"
    child = subprocess.Popen(
        [sys.executable, "-c", REAPER_CHILD, sid, str(fake), how], stdout=subprocess.PIPE, text=True,
        stdin=subprocess.DEVNULL,
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        if how == "killed":
            (reaper,) = _reapers_of(sid)
            assert os.getsid(reaper) not in (os.getsid(0), os.getsid(child.pid))  # a session of its own
        child.kill()
        child.wait()
        if how == "killed":
            _wait("the watcher runs deepbox sandbox rm", lambda: calls.exists() and not _reapers_of(sid), 60)
            assert calls.read_text() == f"sandbox rm {sid}\n"
        else:
            _wait("the retired watcher exits", lambda: not _reapers_of(sid), 60)
            assert not calls.exists()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        if child.stdout:
            child.stdout.close()
        for pid in _reapers_of(sid):
            os.kill(pid, signal.SIGKILL)
