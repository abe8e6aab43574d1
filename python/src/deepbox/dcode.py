"""``dcode --sandbox deepbox``: a deepagents-code sandbox provider.

Registered under deepagents-code's entry-point group
``deepagents_code.sandbox_providers`` (see python/pyproject.toml). dcode
calls ``get_or_create(sandbox_id=..., **params)`` and, for sandboxes it
created, ``delete(sandbox_id=...)`` on exit. ``params`` come from
``[sandboxes.providers.deepbox.params]`` in ``~/.deepagents/config.toml``
(with ``class_path = "deepbox.dcode:DeepboxProvider"`` in
``[sandboxes.providers.deepbox]``, which dcode requires once the table
exists): ``ttl``, ``labels``, ``network``, ``pool``, ``image``, ``artifacts_root``; the
environment variables ``DEEPBOX_TTL``, ``DEEPBOX_NETWORK``, ``DEEPBOX_IMAGE`` and
``DEEPBOX_POOL`` are the defaults.

Besides dcode's interface, the provider keeps the provider contract that
langchain-tests documents for ``SandboxProviderIntegrationTests``:
``list()`` (``{"items": [{"sandbox_id", "metadata"}], "cursor": None}``: the
sandboxes this provider's labels select), an idempotent ``delete``,
``SandboxNotFoundError`` for a missing id, and the async twins
(``aget_or_create``, ``alist``, ``adelete``). ``DeepboxProvider(provider="k8s",
...)`` claims Kubernetes sandboxes instead (the arguments of
``Sandbox.claim``). Either reattaches (``get_or_create(sandbox_id=)``) to any
sandbox of the user, made by this object or another process, through
``deepbox sandbox inspect --json`` (``Sandbox.attach``).

dcode's own ``delete`` on exit is not enough (its server is stopped with
SIGTERM and SIGKILL 3 s later, and outlives a SIGKILLed client), so every
sandbox this provider creates gets a watcher (``deepbox._reaper``) that
deletes it when the server that created it, or the dcode client that
started that server, is gone.
"""

from __future__ import annotations

import asyncio
import json
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

    class SandboxNotFoundError(LookupError):  # type: ignore[no-redef]
        """The requested sandbox does not exist (dcode's own class when it is installed)."""

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
    """deepbox sandboxes for dcode (local ones unless ``provider="k8s"``).

    Args:
        provider: ``"local"`` or ``"k8s"``.
        labels: Labels of every sandbox it creates, and the selector of
            ``list()`` (with ``deepagents-code/sandbox=true``).
        **claim: For ``k8s``, the keyword arguments of ``Sandbox.claim``
            (``kubeconfig``, ``namespace``, ``warm_pool``, ``router_url``,
            ``router_token``, ``context``, ``ready_timeout``).
    """

    def __init__(self, *, provider: str = "local", labels: dict[str, str] | None = None, **claim: Any) -> None:
        if provider not in ("local", "k8s"):
            raise ValueError(f"provider must be local or k8s, not {provider!r}")
        if claim and provider != "k8s":
            raise TypeError(f"unexpected arguments for the local provider: {sorted(claim)}")
        self._provider = provider
        self._labels = {LABEL: "true", **{str(k): str(v) for k, v in (labels or {}).items()}}
        self._claim = claim
        self._claimed: dict[str, Sandbox] = {}  # k8s: the claims this provider made
        self._reapers: dict[str, _Reaper] = {}
        self._lock = threading.Lock()

    def _attach_args(self) -> dict[str, Any]:
        """What Sandbox.attach takes of this provider's claim arguments."""
        keys = ("namespace", "context", "kubeconfig", "router_url", "router_token")
        return {k: self._claim[k] for k in keys if self._claim.get(k) is not None}

    def _cluster_args(self) -> list[str]:
        args = ["--provider", "k8s"]
        for key in ("namespace", "context", "kubeconfig"):
            if self._claim.get(key):
                args += [f"--{key}", str(self._claim[key])]
        return args

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
        if self._provider == "k8s":
            return self._k8s_get_or_create(sandbox_id, kwargs, artifacts_root)
        if sandbox_id:
            try:
                sb = Sandbox.attach(sandbox_id)
            except CLIError as e:
                raise SandboxNotFoundError(f"deepbox sandbox {sandbox_id}: {e.message}") from e
            return _DcodeSandbox(sb, artifacts_root=artifacts_root)
        labels = {**self._labels, **{str(k): str(v) for k, v in dict(kwargs.pop("labels", {}) or {}).items()}}
        ttl = int(kwargs.pop("ttl", os.environ.get("DEEPBOX_TTL", 3600)))
        network = kwargs.pop("network", os.environ.get("DEEPBOX_NETWORK")) or None
        pool = kwargs.pop("pool", os.environ.get("DEEPBOX_POOL")) or None
        image = kwargs.pop("image", os.environ.get("DEEPBOX_IMAGE")) or None
        sb = Sandbox.create(labels=labels, ttl=ttl, network=network, pool=pool, image=image)
        try:
            reaper = _Reaper(sb.id, find_deepbox_bin())
        except BaseException:
            sb.delete()  # no sandbox without its watcher
            raise
        with self._lock:
            self._reapers[sb.id] = reaper
        return _DcodeSandbox(sb, artifacts_root=artifacts_root)

    def _k8s_get_or_create(self, sandbox_id: str | None, kwargs: dict[str, Any], artifacts_root: Any) -> DeepboxSandbox:
        if sandbox_id:
            # Any claim, made here or by another process: `deepbox sandbox
            # inspect --json` says whether it exists and how to reach it.
            try:
                sb = Sandbox.attach(sandbox_id, provider="k8s", **self._attach_args())
            except CLIError as e:
                with self._lock:
                    self._claimed.pop(sandbox_id, None)  # deleted elsewhere, or its TTL ran out
                if e.exit_code in (2, 3):  # no such claim, or no claim id at all
                    raise SandboxNotFoundError(f"deepbox sandbox {sandbox_id}: {e.message}") from e
                raise
            with self._lock:
                mine = self._claimed.get(sb.id)
            return _DcodeSandbox(mine if mine is not None else sb, artifacts_root=artifacts_root)
        labels = {**self._labels, **{str(k): str(v) for k, v in dict(kwargs.pop("labels", {}) or {}).items()}}
        ttl = int(kwargs.pop("ttl", os.environ.get("DEEPBOX_TTL", 3600)))
        sb = Sandbox.claim(labels=labels, ttl=ttl, **self._claim)
        with self._lock:
            self._claimed[sb.id] = sb
        return _DcodeSandbox(sb, artifacts_root=artifacts_root)

    def _k8s_ids(self, selector: str | None = None) -> list[str]:
        args = ["sandbox", "ls", "-q", *self._cluster_args()]
        if selector:
            args += ["--selector", selector]
        return [line.strip() for line in run_cli(args).splitlines() if line.strip()]

    def list(self, *, cursor: str | None = None, **kwargs: Any) -> dict[str, Any]:
        """The sandboxes this provider's labels select, in one page (``cursor`` is always None)."""
        return _off_event_loop(self._list)

    def _list(self) -> dict[str, Any]:
        selector = ",".join(f"{k}={v}" for k, v in sorted(self._labels.items()))
        if self._provider == "k8s":
            items = [{"sandbox_id": i, "metadata": {"provider": "k8s"}} for i in self._k8s_ids(selector)]
        else:
            records = json.loads(run_cli(["sandbox", "ls", "--json", "--selector", selector]) or "[]")
            items = [
                {
                    "sandbox_id": str(r.get("id")),
                    "metadata": {"provider": "local", "state": r.get("state"), "labels": r.get("labels") or {}},
                }
                for r in records
                if isinstance(r, dict)
            ]
        return {"items": items, "cursor": None}

    def delete(self, *, sandbox_id: str, **kwargs: Any) -> None:
        """Deletes the sandbox; a missing one is not an error."""
        _off_event_loop(lambda: self._delete(sandbox_id))

    def _delete(self, sandbox_id: str) -> None:
        cluster = self._cluster_args() if self._provider == "k8s" else []
        try:
            run_cli(["sandbox", "rm", *cluster, sandbox_id])
        except CLIError as e:
            if e.exit_code != 3:  # already gone is fine
                raise
        with self._lock:
            reaper = self._reapers.pop(sandbox_id, None)
            claimed = self._claimed.pop(sandbox_id, None)
        if claimed is not None:
            claimed.deleted = True
        if reaper is not None:
            reaper.done()

    # The async twins (dcode's base class has the first two; the contract has all three).
    async def aget_or_create(self, *, sandbox_id: str | None = None, **kwargs: Any) -> DeepboxSandbox:
        return await asyncio.to_thread(lambda: self._get_or_create(sandbox_id, dict(kwargs)))

    async def alist(self, *, cursor: str | None = None, **kwargs: Any) -> dict[str, Any]:
        return await asyncio.to_thread(self._list)

    async def adelete(self, *, sandbox_id: str, **kwargs: Any) -> None:
        await asyncio.to_thread(self._delete, sandbox_id)
