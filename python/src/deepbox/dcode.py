"""``dcode --sandbox deepbox``: a deepagents-code sandbox provider.

Registered under deepagents-code's entry-point group
``deepagents_code.sandbox_providers`` (see python/pyproject.toml). dcode
calls ``get_or_create(sandbox_id=..., **params)`` and, for sandboxes it
created, ``delete(sandbox_id=...)`` on exit. ``params`` come from
``[sandboxes.providers.deepbox.params]`` in ``~/.deepagents/config.toml``
(with ``class_path = "deepbox.dcode:DeepboxProvider"`` in
``[sandboxes.providers.deepbox]``, which dcode requires once the table
exists): ``ttl``, ``labels``, ``network``, ``pool``, ``artifacts_root``; the
environment variables ``DEEPBOX_TTL``, ``DEEPBOX_NETWORK`` and
``DEEPBOX_POOL`` are the defaults.

dcode's own ``delete`` on exit is not enough (its server is stopped with
SIGTERM and SIGKILL 3 s later, and outlives a SIGKILLed client), so every
sandbox this provider creates gets a watcher (``deepbox._reaper``) that
deletes it when the server that created it, or the dcode client that
started that server, is gone.
"""

from __future__ import annotations

import asyncio
import os
import select
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from deepbox.deepagents import DeepboxSandbox
from deepbox.errors import CLIError, DeepboxError
from deepbox.sandbox import Sandbox, find_deepbox_bin, run_cli

try:
    from deepagents_code.integrations.sandbox_provider import (
        SandboxInstallHint,
        SandboxNotFoundError,
        SandboxProvider,
        SandboxProviderMetadata,
    )
except ImportError:  # deepagents-code is not installed: the class still imports
    SandboxProvider = object  # type: ignore[assignment,misc]
    SandboxProviderMetadata = None  # type: ignore[assignment,misc]
    SandboxInstallHint = None  # type: ignore[assignment,misc]
    SandboxNotFoundError = LookupError  # type: ignore[assignment,misc]

T = TypeVar("T")

WORKING_DIR = "/workspace"
LABEL = "deepagents-code/sandbox"


def _off_event_loop(fn: Callable[[], T]) -> T:
    """Runs ``fn`` in a worker thread when called on an event loop's thread.

    dcode's server builds its graph (and so creates the sandbox) on its event
    loop, where langgraph's blockbuster refuses blocking calls (our subprocess
    and socket I/O). The wait polls with ``select`` (a plain sleep, which
    blockbuster leaves alone) instead of a lock or ``time.sleep``.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return fn()
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["value"] = fn()
        except BaseException as e:  # handed back to the caller
            box["error"] = e
        box["done"] = True

    threading.Thread(target=work, name="deepbox-provider", daemon=True).start()
    while "done" not in box:
        select.select([], [], [], 0.01)
    if "error" in box:
        raise box["error"]
    return box["value"]


def _is_dcode_client(pid: int) -> bool:
    """Whether ``pid`` runs deepagents-code's client (``dcode``, ``deepagents-code``)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return False
    for arg in argv[:3]:
        name = os.path.basename(arg.decode("utf-8", "replace"))
        if name in ("dcode", "deepagents-code", "deepagents_code") or "deepagents_code" in arg.decode("utf-8", "replace"):
            return True
    return False


def _watched_pids() -> list[int]:
    """This process, and the dcode client that started it when it is dcode's server.

    dcode starts its server in a session of its own (``start_new_session``)
    and is the only one who stops it: a SIGKILLed client leaves the server
    (and so this process) running, so the sandbox must end with the client.
    """
    pids = [os.getpid()]
    parent = os.getppid()
    if parent > 1 and os.getsid(0) == os.getpid() and _is_dcode_client(parent):
        pids.append(parent)
    return pids


class _Reaper:
    """The watcher of one sandbox (see ``deepbox._reaper``); ``done()`` retires it."""

    def __init__(self, sandbox_id: str, deepbox_bin: str) -> None:
        pidfds = [os.pidfd_open(pid) for pid in _watched_pids()]
        r, self._w = os.pipe()
        # This very package, wherever it was imported from.
        here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p)}
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", "deepbox._reaper", sandbox_id, deepbox_bin, ",".join(map(str, pidfds)), str(r)],
                pass_fds=(*pidfds, r),
                start_new_session=True,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                cwd="/",  # holds no directory of the user's busy
                env=env,
            )
            # The first process forks the watcher and exits at once.
            _, err = proc.communicate()
        except BaseException:
            os.close(self._w)
            raise
        finally:
            for fd in (*pidfds, r):
                os.close(fd)
        if proc.returncode != 0:
            os.close(self._w)
            raise DeepboxError(
                f"cannot start the watcher that deletes the sandbox with dcode (exit {proc.returncode}): "
                + err.decode("utf-8", "replace").strip()[-500:]
            )

    def done(self) -> None:
        """The sandbox was deleted here: the watcher exits without deleting."""
        if self._w < 0:
            return
        try:
            os.write(self._w, b"d")
        except OSError:
            pass
        os.close(self._w)
        self._w = -1


class _DcodeSandbox(DeepboxSandbox):
    """``DeepboxSandbox`` whose ``execute`` also works on dcode's event loop.

    dcode runs ``--sandbox-setup`` scripts with a sync ``execute`` on its
    server's event loop, where blockbuster refuses our socket I/O ("Blocking
    call to socket.socket.connect"); tools run elsewhere and are unaffected.
    """

    def execute(self, command: str, *, timeout: int | None = None) -> Any:
        return _off_event_loop(lambda: DeepboxSandbox.execute(self, command, timeout=timeout))


class DeepboxProvider(SandboxProvider):  # type: ignore[misc,valid-type]
    """Local deepbox sandboxes for dcode."""

    def __init__(self) -> None:
        self._reapers: dict[str, _Reaper] = {}
        self._lock = threading.Lock()

    @property
    def metadata(self) -> Any:
        if SandboxProviderMetadata is None:
            return None
        return SandboxProviderMetadata(
            name="deepbox",
            working_dir=WORKING_DIR,
            install=SandboxInstallHint(kind="package", name="deepbox") if SandboxInstallHint else None,
            supports_sandbox_id=True,
            supports_snapshot_name=False,
            backend_module="deepbox.deepagents",
        )

    def get_or_create(self, *, sandbox_id: str | None = None, **kwargs: Any) -> DeepboxSandbox:
        return _off_event_loop(lambda: self._get_or_create(sandbox_id, dict(kwargs)))

    def _get_or_create(self, sandbox_id: str | None, kwargs: dict[str, Any]) -> DeepboxSandbox:
        artifacts_root = kwargs.pop("artifacts_root", None)
        if sandbox_id:
            try:
                sb = Sandbox.attach(sandbox_id)
            except CLIError as e:
                raise SandboxNotFoundError(f"deepbox sandbox {sandbox_id}: {e.message}") from e
            return _DcodeSandbox(sb, artifacts_root=artifacts_root)
        labels = {LABEL: "true", **{str(k): str(v) for k, v in dict(kwargs.pop("labels", {}) or {}).items()}}
        ttl = int(kwargs.pop("ttl", os.environ.get("DEEPBOX_TTL", 3600)))
        network = kwargs.pop("network", os.environ.get("DEEPBOX_NETWORK")) or None
        pool = kwargs.pop("pool", os.environ.get("DEEPBOX_POOL")) or None
        sb = Sandbox.create(labels=labels, ttl=ttl, network=network, pool=pool)
        try:
            reaper = _Reaper(sb.id, find_deepbox_bin())
        except BaseException:
            sb.delete()  # no sandbox without its watcher
            raise
        with self._lock:
            self._reapers[sb.id] = reaper
        return _DcodeSandbox(sb, artifacts_root=artifacts_root)

    def delete(self, *, sandbox_id: str, **kwargs: Any) -> None:
        _off_event_loop(lambda: self._delete(sandbox_id))

    def _delete(self, sandbox_id: str) -> None:
        try:
            run_cli(["sandbox", "rm", sandbox_id])
        except CLIError as e:
            if e.exit_code != 3:  # already gone is fine
                raise
        with self._lock:
            reaper = self._reapers.pop(sandbox_id, None)
        if reaper is not None:
            reaper.done()
