"""A Harbor environment (Terminal-Bench's harness) backed by deepbox sandboxes.

``harbor run --env deepbox.harbor:DeepboxEnvironment ...`` (Harbor 0.25's
``--env`` takes an environment import path) runs every trial in a fresh
local deepbox sandbox: no Docker. Harbor's own code is imported only here,
so the rest of the package does not need it (Harbor needs Python >= 3.12).

Harbor places fixed paths in the environment: ``/logs/{agent,verifier,
artifacts}``, ``/tests`` and ``/solution``. A local sandbox's root is the
host's system directories, read-only, with ``/workspace`` and ``/tmp``
writable, so those paths cannot exist there. Until sandboxes can have a
writable root (an image), they live under ``/workspace/.harbor/`` and are
translated where Harbor names them: in file transfers, in the commands
Harbor runs, and in the text files it uploads to ``/tests`` and
``/solution`` (the task's scripts, which write ``/logs/verifier/reward.txt``).
A task's ``workdir`` outside ``/workspace`` and ``/tmp`` (Terminal-Bench
uses ``/app``) is translated to ``/workspace`` the same way.

The task's ``docker_image`` is handed to ``Sandbox.create(image=...)`` once
that keyword exists (an image helper is adding it); until then the host's
system directories are the sandbox's root and a task that names an image
gets a warning.
"""

from __future__ import annotations

import asyncio
import inspect
import io
import os
import re
import shlex
import subprocess
import tarfile
from pathlib import Path
from typing import Any

from harbor.environments.base import BaseEnvironment, ExecResult, transfer_tar_filter
from harbor.environments.capabilities import EnvironmentCapabilities, EnvironmentResourceCapabilities
from harbor.models.task.config import NetworkMode, NetworkPolicy

from deepbox.client import ExecCancel
from deepbox.sandbox import Sandbox, find_deepbox_bin

WORKSPACE = "/workspace"
HARBOR_DIR = "/workspace/.harbor"
# Harbor's fixed container paths (harbor.models.trial.paths.EnvironmentPaths).
HARBOR_ROOTS = ("/logs", "/tests", "/solution")
# Text files bigger than this are uploaded unchanged (no path translation).
_MAX_TRANSLATED_FILE = 1 << 20
# A command's output kept per stream (Harbor's large outputs go to files).
_MAX_OUTPUT = 256 << 20


def _writable(path: str) -> bool:
    return any(path == d or path.startswith(d + "/") for d in (WORKSPACE, "/tmp"))


class DeepboxEnvironment(BaseEnvironment):
    """One Harbor trial environment: a local deepbox sandbox.

    Environment kwargs (``--ek key=value``): ``ttl`` (seconds, default 3600;
    the sandbox deletes itself then even if Harbor dies), ``deepbox_bin``.
    """

    def __init__(self, *args: Any, ttl: int | str = 3600, deepbox_bin: str | None = None, **kwargs: Any) -> None:
        self._ttl = int(ttl)
        self._deepbox_bin = deepbox_bin
        self._sandbox: Sandbox | None = None
        super().__init__(*args, **kwargs)
        workdir = self.task_env_config.workdir
        # Path prefix -> where it lives in the sandbox, longest first.
        roots = {root: f"{HARBOR_DIR}{root}" for root in HARBOR_ROOTS}
        if workdir and not _writable(workdir.rstrip("/") or "/"):
            roots[workdir.rstrip("/")] = WORKSPACE
        self._roots = dict(sorted(roots.items(), key=lambda kv: -len(kv[0])))
        alternatives = "|".join(re.escape(r) for r in self._roots)
        # A prefix at the start of a path: not preceded by a path character,
        # followed by a separator or the end of a word.
        self._root_re = re.compile(rf"(?<![\w./~$-])({alternatives})(?=/|$|[\s'\";|&)<>`:])")

    # ---- what Harbor asks of an environment -----------------------------------------

    @staticmethod
    def type() -> str:
        return "deepbox"

    @classmethod
    def preflight(cls) -> None:
        try:
            deepbox = find_deepbox_bin()
        except Exception as e:  # noqa: BLE001 (any reason is reported)
            raise SystemExit(f"deepbox environment: the deepbox binary was not found ({e})") from e
        p = subprocess.run([deepbox, "doctor"], capture_output=True, text=True, stdin=subprocess.DEVNULL)
        if p.returncode != 0:
            raise SystemExit(
                f"deepbox environment: this host cannot run deepbox sandboxes (`{deepbox} doctor` exited "
                f"{p.returncode}): {(p.stdout + p.stderr).strip()[-1000:]}"
            )

    @classmethod
    def resource_capabilities(cls) -> EnvironmentResourceCapabilities:
        return EnvironmentResourceCapabilities(cpu_limit=True, memory_limit=True)

    @property
    def capabilities(self) -> EnvironmentCapabilities:
        # deepbox's --network: none, public, or allow=NAME[,NAME...] (exact and
        # leading-wildcard names through its filtering proxy).
        return EnvironmentCapabilities(
            disable_internet=True,
            network_allowlist=True,
            network_allowlist_hostnames=True,
            network_allowlist_wildcard_hostnames=True,
        )

    def _validate_definition(self) -> None:
        # No Dockerfile is needed: the sandbox's root is the host's system
        # directories (or, later, the task's docker_image).
        if not self.environment_dir.is_dir():
            raise FileNotFoundError(f"the task's environment directory {self.environment_dir} does not exist")

    # ---- lifecycle ------------------------------------------------------------------

    def _network(self, policy: NetworkPolicy) -> str:
        if policy.network_mode == NetworkMode.NO_NETWORK:
            return "none"
        if policy.network_mode == NetworkMode.ALLOWLIST:
            return "allow=" + ",".join(policy.allowed_hosts)
        return "public"

    def _create_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "labels": {"harbor.deepbox/session": re.sub(r"[^A-Za-z0-9_.-]", "-", self.session_id)[:63]},
            "ttl": self._ttl,
            "network": self._network(self._network_policy),
            "deepbox_bin": self._deepbox_bin,
            "cold": True,
        }
        cpus = self._resource_value("cpu")
        memory_mb = self._resource_value("memory")
        if cpus:
            kwargs["cpus"] = float(cpus)
        if memory_mb:
            kwargs["memory"] = f"{int(memory_mb)}M"
        image = self.task_env_config.docker_image
        if image:
            if "image" in inspect.signature(Sandbox.create).parameters:
                kwargs["image"] = image
            else:
                self.logger.warning(
                    f"deepbox: this deepbox cannot run images yet; task image {image!r} is ignored and the "
                    "host's system directories are the sandbox's root"
                )
        return kwargs

    async def start(self, force_build: bool) -> None:
        sb = await asyncio.to_thread(lambda: Sandbox.create(**self._create_kwargs()))
        self._sandbox = sb
        dirs = [f"{HARBOR_DIR}{r}" for r in ("/logs/agent", "/logs/verifier", "/logs/artifacts", "/tests", "/solution")]
        await asyncio.to_thread(lambda: [sb.mkdir(d) for d in dirs])
        # The task's environment/ files (all but the Docker build files) are its
        # starting point in the working directory.
        files = [
            p
            for p in sorted(self.environment_dir.rglob("*"))
            if p.is_file() and p.name not in ("Dockerfile", "docker-compose.yaml", "docker-compose.yml", ".dockerignore")
        ]
        workdir = self._workdir()
        for p in files:
            await self.upload_file(p, f"{workdir}/{p.relative_to(self.environment_dir).as_posix()}")

    async def stop(self, delete: bool) -> None:
        sb, self._sandbox = self._sandbox, None
        if sb is not None and delete:
            await asyncio.to_thread(sb.delete)

    def _require(self) -> Sandbox:
        if self._sandbox is None:
            raise RuntimeError("the deepbox environment is not started")
        return self._sandbox

    # ---- paths ----------------------------------------------------------------------

    def _workdir(self) -> str:
        return self.sandbox_path(self.task_env_config.workdir or WORKSPACE)

    def sandbox_path(self, path: str | os.PathLike[str]) -> str:
        """Where a path Harbor names lives in the sandbox (see the module's doc)."""
        p = str(path)
        for root, target in self._roots.items():
            if p == root or p.startswith(root + "/"):
                return target + p[len(root) :]
        return p

    def translate(self, text: str) -> str:
        """``text`` (a command or a script) with Harbor's fixed paths translated."""
        return self._root_re.sub(lambda m: self._roots[m.group(1)], text)

    # ---- commands -------------------------------------------------------------------

    async def exec(
        self,
        command: str,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout_sec: int | None = None,
        user: str | int | None = None,
    ) -> ExecResult:
        # ``user`` cannot be honoured: every sandbox process runs as its one
        # unprivileged user (uid 1000), which owns the writable directories.
        sb = self._require()
        merged = self._merge_env(env) or {}
        cancel = ExecCancel()
        run = lambda: sb.exec(  # noqa: E731
            ["/bin/bash", "-c", self.translate(command)],
            cwd=self.sandbox_path(cwd) if cwd else self._workdir(),
            env=merged,
            timeout=timeout_sec or None,
            max_output_bytes=_MAX_OUTPUT,
            cancel=cancel,
        )
        task = asyncio.ensure_future(asyncio.to_thread(run))
        try:
            r = await asyncio.shield(task)
        except asyncio.CancelledError:
            # Harbor's agent timeout cancels us: end the command in the sandbox.
            cancel.cancel()
            try:
                await task  # the worker thread ends with the command
            except Exception:  # noqa: BLE001 (ExecCancelledError, or it ended first: gone either way)
                pass
            raise
        if r.status == "timed_out":
            raise RuntimeError(f"Command timed out after {timeout_sec} seconds")
        return ExecResult(
            stdout=r.stdout.decode("utf-8", "replace"),
            stderr=r.stderr.decode("utf-8", "replace"),
            return_code=r.returncode,
        )

    # ---- files ----------------------------------------------------------------------

    def _translated_content(self, target: str, data: bytes) -> bytes:
        """A text file uploaded to /tests or /solution, with the paths translated."""
        if len(data) > _MAX_TRANSLATED_FILE or b"\0" in data:
            return data
        if not any(target == r or target.startswith(r + "/") for r in ("/tests", "/solution")):
            return data
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return data
        return self.translate(text).encode("utf-8")

    def _put(self, target: str, data: bytes, mode: int) -> None:
        sb = self._require()
        path = self.sandbox_path(target)
        data = self._translated_content(target, data)
        if path == WORKSPACE or path.startswith(WORKSPACE + "/"):
            sb.write(path, data, mode=mode)
            return
        # Elsewhere (/tmp): through a shell, which the daemon's file API does not reach.
        r = sb.exec(
            ["/bin/sh", "-c", 'mkdir -p "$(dirname "$1")" && cat > "$1" && chmod "$2" "$1"', "sh", path, f"{mode:o}"],
            stdin=data,
        )
        if not r.ok:
            raise RuntimeError(f"cannot write {target} in the sandbox: {r.stderr.decode('utf-8', 'replace').strip()}")

    def _get(self, source: str) -> bytes:
        sb = self._require()
        path = self.sandbox_path(source)
        if path == WORKSPACE or path.startswith(WORKSPACE + "/"):
            return sb.read_bytes(path)
        r = sb.exec(["cat", "--", path], max_output_bytes=_MAX_OUTPUT)
        if not r.ok or r.stdout_truncated:
            raise RuntimeError(f"cannot read {source} in the sandbox: {r.stderr.decode('utf-8', 'replace').strip()}")
        return r.stdout

    async def upload_file(self, source_path: Path | str, target_path: str) -> None:
        src = Path(source_path)
        data, mode = src.read_bytes(), src.stat().st_mode & 0o777
        await asyncio.to_thread(self._put, target_path, data, mode)

    async def upload_dir(self, source_dir: Path | str, target_dir: str) -> None:
        root = Path(source_dir)
        for p in sorted(root.rglob("*")):
            if p.is_file():
                await self.upload_file(p, f"{target_dir.rstrip('/')}/{p.relative_to(root).as_posix()}")

    async def download_file(self, source_path: str, target_path: Path | str) -> None:
        data = await asyncio.to_thread(self._get, source_path)
        target = Path(target_path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)

    async def download_dir(self, source_dir: str, target_dir: Path | str) -> None:
        sb = self._require()
        path = self.sandbox_path(source_dir)
        r = await asyncio.to_thread(
            lambda: sb.exec(["tar", "-cf", "-", "-C", path, "."], max_output_bytes=_MAX_OUTPUT)
        )
        if not r.ok or r.stdout_truncated:
            raise RuntimeError(f"cannot read directory {source_dir} in the sandbox: {r.stderr.decode('utf-8', 'replace').strip()}")
        target = Path(target_dir)
        target.mkdir(parents=True, exist_ok=True)
        with tarfile.open(fileobj=io.BytesIO(r.stdout), mode="r:") as tf:
            tf.extractall(path=target, filter=transfer_tar_filter)

    async def is_dir(self, path: str, user: str | int | None = None) -> bool:
        return (await self.exec(f"test -d {shlex.quote(self.sandbox_path(path))}", timeout_sec=10)).return_code == 0

    async def is_file(self, path: str, user: str | int | None = None) -> bool:
        return (await self.exec(f"test -f {shlex.quote(self.sandbox_path(path))}", timeout_sec=10)).return_code == 0
