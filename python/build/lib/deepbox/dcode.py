"""``dcode --sandbox deepbox``: a deepagents-code sandbox provider.

Registered under deepagents-code's entry-point group
``deepagents_code.sandbox_providers`` (see python/pyproject.toml). dcode
calls ``get_or_create(sandbox_id=..., **params)`` and, for sandboxes it
created, ``delete(sandbox_id=...)`` on exit. ``params`` come from
``[sandboxes.providers.deepbox.params]`` in ``~/.deepagents/config.toml``:
``ttl``, ``labels``, ``network``, ``pool``, ``artifacts_root``; the
environment variables ``DEEPBOX_TTL``, ``DEEPBOX_NETWORK`` and
``DEEPBOX_POOL`` are the defaults.
"""

from __future__ import annotations

import asyncio
import os
import select
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from deepbox.deepagents import DeepboxSandbox
from deepbox.errors import CLIError
from deepbox.sandbox import Sandbox

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


class DeepboxProvider(SandboxProvider):  # type: ignore[misc,valid-type]
    """Local deepbox sandboxes for dcode."""

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
            return DeepboxSandbox(sb, artifacts_root=artifacts_root)
        labels = {LABEL: "true", **{str(k): str(v) for k, v in dict(kwargs.pop("labels", {}) or {}).items()}}
        ttl = int(kwargs.pop("ttl", os.environ.get("DEEPBOX_TTL", 3600)))
        network = kwargs.pop("network", os.environ.get("DEEPBOX_NETWORK")) or None
        pool = kwargs.pop("pool", os.environ.get("DEEPBOX_POOL")) or None
        sb = Sandbox.create(labels=labels, ttl=ttl, network=network, pool=pool)
        return DeepboxSandbox(sb, artifacts_root=artifacts_root)

    def delete(self, *, sandbox_id: str, **kwargs: Any) -> None:
        _off_event_loop(lambda: self._delete(sandbox_id))

    def _delete(self, sandbox_id: str) -> None:
        try:
            Sandbox.attach(sandbox_id).delete()
        except CLIError as e:
            if e.exit_code != 3:  # already gone is fine
                raise
