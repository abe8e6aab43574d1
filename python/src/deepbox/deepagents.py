"""``DeepboxSandbox``: a deepagents sandbox backend on deepbox's daemon.

Every file method (ls, read, write, edit, delete, grep, glob, upload_files,
download_files, and their async twins) is one or two requests to the daemon's
native file API: no file operation starts a process in the sandbox. Results
are deepagents' own types with deepagents' error strings and codes (those of
its ``BaseSandbox``).

Paths outside the daemon's root (``/workspace`` in deepbox sandboxes) cannot
be served natively; for those the backend falls back to deepagents' stock
``BaseSandbox`` implementation (a ``python3`` script per call) and to shell
``cp``/``cat`` for transfers. See python/README.md.

Large tool-result eviction: deepagents' middleware writes evicted results
under the backend's ``artifacts_root``, which it reads only from a
``CompositeBackend``; deepagents' default ``/`` is read-only in many
sandboxes. ``DeepboxSandbox`` is therefore also a ``CompositeBackend`` (with no
routes) whose ``artifacts_root`` defaults to ``<daemon root>/.deepagents``,
so ``create_deep_agent(backend=DeepboxSandbox(...))`` evicts to
``/workspace/.deepagents/large_tool_results/`` out of the box.
"""

from __future__ import annotations

import asyncio
import base64
import codecs
import dataclasses
import functools
import logging
import posixpath
import secrets
import signal
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from deepagents.backends.composite import CompositeBackend
from deepagents.backends.protocol import (
    DeleteResult,
    EditResult,
    ExecuteResponse,
    FileData,
    FileDownloadResponse,
    FileInfo,
    FileUploadResponse,
    GlobResult,
    GrepMatch,
    GrepResult,
    LsResult,
    ReadResult,
    WriteResult,
)
from deepagents.backends.sandbox import BaseSandbox

from deepbox.client import DaemonClient, ExecCancel
from deepbox.errors import DaemonError, DaemonUnavailableError, DeepboxError, ExecCancelledError, SandboxGoneError
from deepbox.sandbox import AsyncSandbox, Sandbox

try:  # present in every deepagents 0.7; guarded so a rename degrades, not breaks
    from deepagents.backends.utils import EMPTY_OLD_STRING_ERROR, _get_backend_read_file_type
except ImportError:  # pragma: no cover
    EMPTY_OLD_STRING_ERROR = "Error: old_string cannot be empty. Provide the exact text to replace."

    def _get_backend_read_file_type(path: str) -> str:
        return "text"


from deepagents.backends import protocol as _protocol
from deepagents.backends import sandbox as _sandbox

logger = logging.getLogger(__name__)

# deepagents' limits, so results match its BaseSandbox exactly.
MAX_BINARY_BYTES: int = getattr(_sandbox, "MAX_BINARY_BYTES", 500 * 1024)
MAX_OUTPUT_BYTES: int = getattr(_sandbox, "MAX_OUTPUT_BYTES", 500 * 1024)
TRUNCATION_MSG: str = getattr(
    _sandbox,
    "TRUNCATION_MSG",
    "\n\n[Output was truncated due to size limits. This paginated read result exceeded the sandbox stdout "
    "limit. Continue reading with a larger offset or smaller limit to inspect the rest of the file.]",
)
ASYNC_GREP_TIMEOUT: int = getattr(_protocol, "ASYNC_GREP_TIMEOUT", 35)
ASYNC_GLOB_TIMEOUT: int = getattr(_protocol, "ASYNC_GLOB_TIMEOUT", 30)
EMPTY_FILE_REMINDER = "System reminder: File exists but has empty contents"
# deepagents decides text vs. binary on the first 8 KiB (incremental UTF-8).
_BINARY_PROBE_BYTES = 8192
# A daemon grep without a cap still needs one: the daemon's largest.
_GREP_UNCAPPED = 1_000_000
DEFAULT_EXECUTE_TIMEOUT = 1800
# Tool calls answered with "the sandbox is gone" before the next one raises
# SandboxGoneError (ending the agent's run): room for a turn of parallel calls
# and a model that retries once, not for a loop.
DEFAULT_MAX_CALLS_AFTER_GONE = 20


def _make(cls: type, **kwargs: Any) -> Any:
    """Builds a deepagents result, dropping fields an older deepagents lacks."""
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in kwargs.items() if k in names})


def _looks_binary(head: bytes) -> bool:
    try:
        codecs.getincrementaldecoder("utf-8")().decode(head[:_BINARY_PROBE_BYTES], final=False)
    except UnicodeDecodeError:
        return True
    return False


# Daemon error code -> deepagents FileOperationError (upload/download).
_TRANSFER_CODES = {
    "NOT_FOUND": "file_not_found",
    "PERMISSION_DENIED": "permission_denied",
    "IS_DIRECTORY": "is_directory",
    "NOT_DIRECTORY": "invalid_path",
    "INVALID_ARGUMENT": "invalid_path",
}

# Daemon error code -> the codes deepagents' BaseSandbox scripts report.
_READ_CODES = {
    "NOT_FOUND": "file_not_found",
    "PERMISSION_DENIED": "permission_denied",
    "IS_DIRECTORY": "not_a_file",
    "NOT_DIRECTORY": "file_not_found",
    "INVALID_ARGUMENT": "not_a_file",
}
_LS_CODES = {
    "NOT_FOUND": "path_not_found",
    "NOT_DIRECTORY": "not_a_directory",
    "PERMISSION_DENIED": "permission_denied",
    "INVALID_ARGUMENT": "not_a_directory",
}


def _shell_transfer_error(stderr: str) -> str:
    """Maps a coreutils or shell (dash, bash) message to a deepagents FileOperationError.

    Always one of deepagents' literals: dash says "cannot create P: Directory
    nonexistent" where coreutils says "No such file or directory".
    """
    text = stderr.lower()
    if "no such file" in text or "directory nonexistent" in text or "nonexistent directory" in text:
        return "file_not_found"
    if "permission denied" in text or "operation not permitted" in text or "read-only file system" in text:
        return "permission_denied"
    if "is a directory" in text or "omitting directory" in text:
        return "is_directory"
    logger.debug("transfer failed: %s", stderr.strip())
    return "invalid_path"  # not a directory, exists, or anything else (as deepagents' own backends)


# ---- Ctrl-C stops running commands ---------------------------------------

# Commands running now (every DeepboxSandbox of this process), and the SIGINT
# handler that was there before ours.
_INFLIGHT: set[ExecCancel] = set()
_PREV_SIGINT: Any = None


def _on_sigint(signum: int, frame: Any) -> None:
    """Cancels every running command, then does what the previous handler did.

    A sync ``agent.invoke`` runs tools in worker threads, which never see the
    KeyboardInterrupt: without this, Ctrl-C would wait for the command.
    """
    for c in list(_INFLIGHT):
        c.cancel()
    prev = _PREV_SIGINT
    if callable(prev):
        prev(signum, frame)
    else:
        raise KeyboardInterrupt


def _install_sigint_hook() -> None:
    """Chains ``_on_sigint`` before the current Python SIGINT handler (main thread only)."""
    global _PREV_SIGINT  # noqa: PLW0603
    if threading.current_thread() is not threading.main_thread():
        return
    current = signal.getsignal(signal.SIGINT)
    if current is _on_sigint or not callable(current):
        return  # already ours; or SIG_IGN/SIG_DFL (Ctrl-C ignored, or it kills the process and its connections)
    _PREV_SIGINT = current
    signal.signal(signal.SIGINT, _on_sigint)


# ---- a sandbox that went away --------------------------------------------

F = TypeVar("F", bound=Callable[..., Any])

# The deepagents result that carries an error, per tool. deepagents' ls,
# read_file and glob tools put "Error: " before the error themselves.
_PREFIXED_BY_TOOL = {"ls", "read", "glob"}
_ERROR_RESULTS: dict[str, Callable[[str], Any]] = {
    "execute": lambda msg: ExecuteResponse(output=msg, exit_code=None),
    "ls": lambda msg: LsResult(error=msg),
    "read": lambda msg: ReadResult(error=msg),
    "write": lambda msg: WriteResult(error=msg),
    "edit": lambda msg: EditResult(error=msg),
    "delete": lambda msg: DeleteResult(error=msg),
    "grep": lambda msg: GrepResult(error=msg),
    "glob": lambda msg: GlobResult(error=msg),
}


def _error_result(kind: str, message: str) -> Any:
    """``message`` ("Error: ...") as the error result of the tool ``kind``."""
    if kind in _PREFIXED_BY_TOOL:
        message = message.removeprefix("Error: ")
    return _ERROR_RESULTS[kind](message)


def _tool(kind: str) -> Callable[[F], F]:
    """One behaviour for every tool when the daemon cannot be reached.

    The first such failure asks deepbox why (``Sandbox.gone_reason``). A
    sandbox that is gone (deleted, expired, died) gives every later call the
    same error, in the tool's own deepagents result form (``transfer``: raises
    ``SandboxGoneError``, since deepagents' transfer error codes cannot say
    it), without asking again; after ``max_calls_after_gone`` such answers
    the next call raises ``SandboxGoneError`` so that a model that ignores
    the error does not loop. A sandbox that still exists (its daemon
    restarting) gets a retryable error. No message holds a host path.

    Calls nested in another tool call (deepagents' stock code outside the
    daemon's root calls ``execute``) leave the decision to the outer call.
    """

    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(self: DeepboxSandbox, *args: Any, **kwargs: Any) -> Any:
            depth = getattr(self._calls, "depth", 0)
            if depth:
                return fn(self, *args, **kwargs)
            if self._gone is not None:
                return self._gone_answer(kind)
            self._calls.depth = 1
            try:
                return fn(self, *args, **kwargs)
            except SandboxGoneError as e:
                self._gone = e
                return self._gone_answer(kind)
            except DaemonUnavailableError:
                return self._unavailable_answer(kind)
            finally:
                self._calls.depth = 0

        return wrapper  # type: ignore[return-value]

    return decorate


class _Core(BaseSandbox):
    """The non-composite sandbox behind ``DeepboxSandbox`` (its ``default``).

    deepagents' middleware looks through a ``CompositeBackend`` at its
    ``default`` (to decide that ``execute`` exists and to run it); this object
    forwards everything to the ``DeepboxSandbox`` that owns it.
    """

    def __init__(self, owner: DeepboxSandbox) -> None:
        self._owner = owner

    @property
    def id(self) -> str:
        return self._owner.id

    def execute(self, command: str, *, timeout: int | None = None) -> ExecuteResponse:
        return self._owner.execute(command, timeout=timeout)

    async def aexecute(self, command: str, *, timeout: int | None = None) -> ExecuteResponse:  # noqa: ASYNC109
        return await self._owner.aexecute(command, timeout=timeout)

    def upload_files(self, files: list[tuple[str, bytes]]) -> list[FileUploadResponse]:
        return self._owner.upload_files(files)

    def download_files(self, paths: list[str]) -> list[FileDownloadResponse]:
        return self._owner.download_files(paths)



def _forward(name: str) -> Any:
    def method(self: _Core, *args: Any, **kwargs: Any) -> Any:
        return getattr(self._owner, name)(*args, **kwargs)

    method.__name__ = name
    return method


# Every file operation of the core is the owner's (native) one.
for _name in ("ls", "read", "write", "edit", "delete", "grep", "glob"):
    setattr(_Core, _name, _forward(_name))
    setattr(_Core, "a" + _name, _forward("a" + _name))
setattr(_Core, "aupload_files", _forward("aupload_files"))
setattr(_Core, "adownload_files", _forward("adownload_files"))


class DeepboxSandbox(BaseSandbox, CompositeBackend):
    """A deepagents sandbox backend on a deepbox sandbox.

    Args:
        sandbox: A :class:`deepbox.Sandbox` or :class:`deepbox.AsyncSandbox`, a
            :class:`deepbox.DaemonClient`, or a daemon address (``unix:/path``,
            a socket path, ``http://...``).
        artifacts_root: Where deepagents' middleware puts evicted tool results
            and conversation history (default ``<daemon root>/.deepagents``).
        timeout: Default ``execute`` timeout in seconds (``timeout=None``).
        max_output_bytes: Cap on ``execute`` output per stream (default: the
            daemon's, 1 MiB); beyond it ``truncated`` is set.
        delete_on_close: Delete the sandbox in :meth:`close` (and on exit of
            ``with``).
        max_calls_after_gone: Once the sandbox is gone, tool calls answered
            with that error before the next one raises ``SandboxGoneError``.
        cancel_on_interrupt: Ctrl-C (SIGINT) cancels the running commands
            (their process groups are killed) before Python's handler runs;
            installed when constructed in the main thread.
    """

    def __init__(
        self,
        sandbox: Sandbox | AsyncSandbox | DaemonClient | str,
        *,
        artifacts_root: str | None = None,
        timeout: int = DEFAULT_EXECUTE_TIMEOUT,
        max_output_bytes: int | None = None,
        delete_on_close: bool = False,
        sandbox_id: str | None = None,
        max_calls_after_gone: int = DEFAULT_MAX_CALLS_AFTER_GONE,
        cancel_on_interrupt: bool = True,
    ) -> None:
        if isinstance(sandbox, AsyncSandbox):
            sandbox = sandbox.sync
        self._calls = threading.local()
        self._gone: SandboxGoneError | None = None
        self._gone_answers = 0
        self._gone_lock = threading.Lock()
        self.max_calls_after_gone = max_calls_after_gone
        if cancel_on_interrupt:
            _install_sigint_hook()
        if isinstance(sandbox, Sandbox):
            self.sandbox: Sandbox | None = sandbox
            self.client = sandbox.client
            self._id = sandbox.id
        elif isinstance(sandbox, DaemonClient):
            self.sandbox = None
            self.client = sandbox
            self._id = sandbox_id or sandbox.endpoint.address
        else:
            self.sandbox = None
            self.client = DaemonClient(sandbox)
            self._id = sandbox_id or sandbox
        self.root = posixpath.normpath(self.client.root)
        self.default_timeout = timeout
        self.max_output_bytes = max_output_bytes
        self.delete_on_close = delete_on_close
        CompositeBackend.__init__(
            self,
            default=_Core(self),
            routes={},
            artifacts_root=artifacts_root if artifacts_root is not None else posixpath.join(self.root, ".deepagents"),
        )

    def __repr__(self) -> str:
        return f"DeepboxSandbox({self._id!r}, root={self.root!r})"

    @classmethod
    def create(cls, *, artifacts_root: str | None = None, timeout: int = DEFAULT_EXECUTE_TIMEOUT, **create_kwargs: Any) -> DeepboxSandbox:
        """Creates a local sandbox (``Sandbox.create(**create_kwargs)``) deleted by :meth:`close`."""
        sb = Sandbox.create(**create_kwargs)
        return cls(sb, artifacts_root=artifacts_root, timeout=timeout, delete_on_close=True)

    def close(self) -> None:
        if self.delete_on_close and self.sandbox is not None:
            self.sandbox.delete()
        else:
            self.client.close()

    def __enter__(self) -> DeepboxSandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def id(self) -> str:
        return self._id

    # ---- a daemon that does not answer ------------------------------------

    def _gone_message(self) -> str:
        assert self._gone is not None
        return (
            f"Error: {self._gone.cause}. Its files are lost and no tool can run in it: "
            "do not call more tools; tell the user."
        )

    def _gone_answer(self, kind: str) -> Any:
        with self._gone_lock:
            self._gone_answers += 1
            over = self._gone_answers > self.max_calls_after_gone
        if kind == "transfer" or over:
            raise self._gone  # type: ignore[misc]
        return _error_result(kind, self._gone_message())

    def _unavailable_answer(self, kind: str) -> Any:
        """After a DaemonUnavailableError: why (asked once), as the tool's error."""
        who = f"sandbox '{self.sandbox.id}'" if self.sandbox is not None else "the sandbox"
        message = f"Error: {who} cannot be reached: its daemon does not answer (deleted, expired, dead or restarting)."
        if self.sandbox is not None:
            try:
                cause = self.sandbox.gone_reason()
            except DeepboxError as e:
                logger.debug("cannot tell why %s is unreachable: %s", who, e)
            else:
                if cause is not None:
                    with self._gone_lock:
                        if self._gone is None:
                            self._gone = SandboxGoneError(self.sandbox.id, cause)
                    return self._gone_answer(kind)
                if self.sandbox.provider == "local":
                    message = (
                        f"Error: {who} did not answer this call (its daemon may be restarting); "
                        "the sandbox still exists, so the call may be retried."
                    )
        if kind == "transfer":
            raise DaemonUnavailableError(message.removeprefix("Error: "))
        return _error_result(kind, message)

    # ---- routing ----------------------------------------------------------

    def _native(self, path: str | None) -> bool:
        """Whether the daemon serves ``path`` (relative paths are relative to its root)."""
        if path is None or not path.startswith("/"):
            return True
        p = posixpath.normpath(path)
        if p.startswith("//"):
            p = "/" + p.lstrip("/")
        return self.root == "/" or p == self.root or p.startswith(self.root + "/")

    # ---- execute ----------------------------------------------------------

    def execute(self, command: str, *, timeout: int | None = None) -> ExecuteResponse:
        """Runs ``command`` with ``/bin/sh -c`` in the daemon's root.

        ``timeout`` in seconds (``None``: this backend's default; 0: the
        daemon's default). On timeout the process group is killed and the
        exit code is 124. Ctrl-C (see ``cancel_on_interrupt``) kills it too.
        """
        return self._execute(command, timeout, ExecCancel())

    @_tool("execute")
    def _execute(self, command: str, timeout: int | None, cancel: ExecCancel) -> ExecuteResponse:
        t = self.default_timeout if timeout is None else timeout
        _INFLIGHT.add(cancel)
        try:
            r = self.client.exec(command, timeout=t, max_output_bytes=self.max_output_bytes, cancel=cancel)
        except DaemonUnavailableError:
            raise
        except ExecCancelledError:
            return ExecuteResponse(output="Error: the command was cancelled (its process group was killed)", exit_code=None)
        except DeepboxError as e:
            return ExecuteResponse(output=f"Error: {e}", exit_code=None)
        finally:
            _INFLIGHT.discard(cancel)
        output = r.text
        if r.status == "spawn_failed":
            output = f"Error: {r.error or 'the command could not be started'}"
        elif r.status == "timed_out":
            sep = "\n" if output and not output.endswith("\n") else ""
            output = f"{output}{sep}Command timed out after {t} seconds"
        return ExecuteResponse(output=output, exit_code=r.returncode, truncated=r.truncated)

    async def aexecute(self, command: str, *, timeout: int | None = None) -> ExecuteResponse:  # noqa: ASYNC109
        """``execute`` in a worker thread; cancelling the caller kills the command."""
        cancel = ExecCancel()
        task = asyncio.ensure_future(asyncio.to_thread(self._execute, command, timeout, cancel))
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            cancel.cancel()
            await asyncio.wait({task})  # ends at once: its connection is cut
            raise

    # ---- ls ---------------------------------------------------------------

    @_tool("ls")
    def ls(self, path: str) -> LsResult:
        if not self._native(path):
            return super().ls(path)
        try:
            entries = self.client.ls(path)
        except DaemonError as e:
            return LsResult(error=f"Path '{path}': {_LS_CODES.get(e.code, e.message)}")
        infos: list[FileInfo] = []
        for e in entries:
            info: FileInfo = {"path": e.path, "is_dir": e.is_dir, "size": e.size}
            if e.modified_at:
                info["modified_at"] = e.modified_at
            infos.append(info)
        return LsResult(entries=infos)

    async def als(self, path: str) -> LsResult:
        return await asyncio.to_thread(self.ls, path)

    # ---- read -------------------------------------------------------------

    @_tool("read")
    def read(self, file_path: str, offset: int = 0, limit: int = 2000) -> ReadResult:
        if not self._native(file_path):
            return super().read(file_path, offset, limit)
        # Coerced like deepagents does (the model supplies these).
        offset, limit = max(0, int(offset)), max(0, int(limit))
        try:
            if _get_backend_read_file_type(file_path) != "text":
                return self._read_binary(file_path)
            # One request: the page (lines without terminators) plus size,
            # line count and the daemon's binary verdict.
            page = self.client.read(file_path, offset=offset, limit=limit, max_bytes=MAX_OUTPUT_BYTES)
            if page.size == 0:
                return ReadResult(file_data=FileData(content=EMPTY_FILE_REMINDER, encoding="utf-8"))
            if page.binary:
                # The daemon also calls a NUL byte binary; deepagents only invalid UTF-8.
                head = self.client.read(file_path, max_bytes=_BINARY_PROBE_BYTES, binary=True).data or b""
                if _looks_binary(head):
                    return self._read_binary(file_path)
        except DaemonError as e:
            return ReadResult(error=f"File '{file_path}': {_READ_CODES.get(e.code, e.message)}")
        if limit == 0:
            return ReadResult(file_data=FileData(content="", encoding="utf-8"), no_lines_requested=True)
        lines = (page.content or "").split("\n") if page.lines_returned else []
        total = page.total_lines if page.total_lines is not None else offset + len(lines)
        if not lines:
            return ReadResult(error=f"File '{file_path}': Line offset {offset} exceeds file length ({total} lines)")
        # deepagents' page cap: pieces joined by "\n" within MAX_OUTPUT_BYTES
        # minus the notice; a cut line is shown in part but not counted.
        budget = MAX_OUTPUT_BYTES - len(TRUNCATION_MSG.encode("utf-8"))
        parts: list[str] = []
        used = 0
        returned = 0
        truncated = False
        for i, line in enumerate(lines):
            piece = line if i == 0 else "\n" + line
            nbytes = len(piece.encode("utf-8"))
            if used + nbytes > budget:
                truncated = True
                room = budget - used
                if room > 0:
                    prefix = piece.encode("utf-8")[:room].decode("utf-8", errors="ignore")
                    parts.append(prefix)
                break
            parts.append(piece)
            used += nbytes
            returned += 1
        if not truncated and page.truncated:
            # The daemon cut the page (its cap counts no separators): the last
            # line it returned is partial.
            truncated = True
            returned = max(0, returned - 1)
        text = "".join(parts)
        if truncated:
            text += TRUNCATION_MSG
            returned = max(returned, 1)
        end_line = offset + returned
        total = max(total, end_line)
        return ReadResult(
            file_data=FileData(content=text, encoding="utf-8"),
            total_lines=total,
            start_line=offset + 1,
            end_line=end_line,
            next_offset=end_line if end_line < total else None,
        )

    def _read_binary(self, file_path: str) -> ReadResult:
        r = self.client.read(file_path, max_bytes=MAX_BINARY_BYTES, binary=True)
        if r.size == 0:
            return ReadResult(file_data=FileData(content=EMPTY_FILE_REMINDER, encoding="utf-8"))
        if r.size > MAX_BINARY_BYTES:
            return ReadResult(
                error=f"File '{file_path}': Binary file exceeds maximum preview size of {MAX_BINARY_BYTES} bytes"
            )
        return ReadResult(
            file_data=FileData(content=base64.b64encode(r.data or b"").decode("ascii"), encoding="base64")
        )

    async def aread(self, file_path: str, offset: int = 0, limit: int = 2000) -> ReadResult:
        return await asyncio.to_thread(self.read, file_path, offset, limit)

    # ---- write / edit / delete --------------------------------------------

    @_tool("write")
    def write(self, file_path: str, content: str) -> WriteResult:
        if not self._native(file_path):
            return super().write(file_path, content)
        try:
            self.client.write(file_path, content.encode("utf-8"))
        except DaemonError as e:
            return WriteResult(error=f"Failed to write file '{file_path}': {_TRANSFER_CODES.get(e.code, e.message)}")
        return WriteResult(path=file_path)

    async def awrite(self, file_path: str, content: str) -> WriteResult:
        return await asyncio.to_thread(self.write, file_path, content)

    @_tool("edit")
    def edit(self, file_path: str, old_string: str, new_string: str, replace_all: bool = False) -> EditResult:  # noqa: FBT001, FBT002
        if not old_string:
            return EditResult(error=EMPTY_OLD_STRING_ERROR)
        if not self._native(file_path):
            return super().edit(file_path, old_string, new_string, replace_all)
        try:
            n = self.client.edit(file_path, old_string, new_string, replace_all=replace_all)
        except DaemonError as e:
            return EditResult(error=self._edit_error(e, file_path, old_string))
        return EditResult(path=file_path, occurrences=n)

    @staticmethod
    def _edit_error(e: DaemonError, file_path: str, old_string: str) -> str:
        # The strings of deepagents' BaseSandbox (_map_edit_error).
        if e.code == "NOT_FOUND":
            if e.message.startswith("String not found"):
                return f"Error: String not found in file: '{old_string}'"
            return f"Error: File '{file_path}' not found"
        if e.code == "CONFLICT" and e.message.startswith("String appears"):
            return f"Error: String '{old_string}' appears multiple times. Use replace_all=True to replace all occurrences."
        if e.code == "PERMISSION_DENIED":
            return f"Error: Permission denied editing file '{file_path}'"
        if e.code == "IS_DIRECTORY" or (e.code == "INVALID_ARGUMENT" and "not a regular file" in e.message):
            return f"Error: '{file_path}' is not a regular file"
        if e.code == "INVALID_ARGUMENT" and "UTF-8" in e.message:
            return f"Error: File '{file_path}' is not a text file"
        if e.code == "NOT_DIRECTORY":
            return f"Error: File '{file_path}' not found"
        return f"Error editing file '{file_path}': {e.message}"

    async def aedit(self, file_path: str, old_string: str, new_string: str, replace_all: bool = False) -> EditResult:  # noqa: FBT001, FBT002
        return await asyncio.to_thread(self.edit, file_path, old_string, new_string, replace_all)

    @_tool("delete")
    def delete(self, file_path: str) -> DeleteResult:
        if not self._native(file_path):
            return super().delete(file_path)
        try:
            self.client.delete(file_path, recursive=True)
        except DaemonError as e:
            if e.code == "NOT_FOUND":
                return DeleteResult(error=f"Error: '{file_path}' not found")
            return DeleteResult(error=f"Error deleting file '{file_path}': {e.message}")
        return DeleteResult(path=file_path)

    async def adelete(self, file_path: str) -> DeleteResult:
        return await asyncio.to_thread(self.delete, file_path)

    # ---- grep / glob ------------------------------------------------------

    @_tool("grep")
    def grep(self, pattern: str, path: str | None = None, glob: str | None = None, *, max_count: int | None = None) -> GrepResult:
        # GNU grep -F reads a pattern with newlines as alternatives; the
        # daemon refuses it. Rare enough to take the stock path.
        if not self._native(path) or "\n" in pattern or not pattern:
            return super().grep(pattern, path, glob, max_count=max_count)
        base = path or self.root
        base_abs = posixpath.normpath(base if base.startswith("/") else posixpath.join(self.root, base))
        skip_git = ".git" not in base_abs.split("/")
        # One more than asked tells "exactly max_count" from "cut"; matches in
        # .git directories (skipped, as deepagents' BaseSandbox does) may
        # need a bigger request.
        want = max_count + 1 if max_count else _GREP_UNCAPPED
        while True:
            try:
                r = self.client.grep(pattern, base, glob=glob, max_count=min(want, _GREP_UNCAPPED))
            except DaemonError as e:
                return GrepResult(error=f"Path '{path or '.'}': {e.message}")
            matches: list[GrepMatch] = [
                {"path": m.path, "line": m.line, "text": m.text}
                for m in r.matches
                if not (skip_git and "/.git/" in m.path[len(base_abs) :])
            ]
            if not r.truncated or len(matches) >= want or want >= _GREP_UNCAPPED:
                break
            want = min(_GREP_UNCAPPED, want * 4 + len(r.matches))
        if max_count:
            return GrepResult(matches=matches[:max_count], truncated=len(matches) > max_count)
        return GrepResult(matches=matches, truncated=r.truncated)

    async def agrep(self, pattern: str, path: str | None = None, glob: str | None = None, *, max_count: int | None = None) -> GrepResult:
        try:
            return await asyncio.wait_for(
                asyncio.to_thread(self.grep, pattern, path, glob, max_count=max_count), timeout=ASYNC_GREP_TIMEOUT
            )
        except TimeoutError:
            return GrepResult(
                error=f"Error: grep timed out after {ASYNC_GREP_TIMEOUT}s. Try a more specific pattern or a narrower path."
            )

    @_tool("glob")
    def glob(self, pattern: str, path: str | None = None) -> GlobResult:
        """Files matching ``pattern``; without ``path`` the search root is the daemon's root."""
        if not self._native(path):
            return super().glob(pattern, path)
        base = path or self.root
        try:
            paths, truncated = self.client.glob(pattern, base)
        except DaemonError as e:
            if e.code == "NOT_FOUND":
                return GlobResult(matches=[])  # as os.walk on a missing directory
            return GlobResult(error=f"Path '{base}': {e.message}")
        return _make(
            GlobResult,
            matches=[{"path": p, "is_dir": False} for p in paths],
            truncated=truncated,
            truncation_reason="budget" if truncated else None,
        )

    async def aglob(self, pattern: str, path: str | None = None) -> GlobResult:
        try:
            return await asyncio.wait_for(asyncio.to_thread(self.glob, pattern, path), timeout=ASYNC_GLOB_TIMEOUT)
        except TimeoutError:
            return GlobResult(
                error=f"Error: glob timed out after {ASYNC_GLOB_TIMEOUT}s. Try a more specific pattern or a narrower path."
            )

    # ---- transfers --------------------------------------------------------

    def _transfer_tmp(self) -> str:
        # Directly in the root (no directory to leave behind), removed after use.
        return posixpath.join(self.root, f".deepbox-transfer-{secrets.token_hex(8)}")

    def _remove_tmp(self, tmp: str) -> None:
        try:
            self.client.delete(tmp)
        except DeepboxError as e:  # never hides the transfer's own error
            if not (isinstance(e, DaemonError) and e.code == "NOT_FOUND"):
                logger.debug("could not remove transfer file %s: %s", tmp, e)

    @_tool("transfer")
    def upload_files(self, files: list[tuple[str, bytes]]) -> list[FileUploadResponse]:
        out: list[FileUploadResponse] = []
        for path, data in files:
            if not path.startswith("/"):
                out.append(FileUploadResponse(path=path, error="invalid_path"))
                continue
            try:
                if self._native(path):
                    self.client.write(path, data)
                    out.append(FileUploadResponse(path=path))
                else:
                    out.append(FileUploadResponse(path=path, error=self._upload_outside(path, data)))
            except DaemonError as e:
                out.append(FileUploadResponse(path=path, error=_TRANSFER_CODES.get(e.code, "invalid_path")))
        return out

    def _upload_outside(self, path: str, data: bytes) -> str | None:
        # Streamed into the root natively, then copied out by the shell: any size.
        tmp = self._transfer_tmp()
        try:
            self.client.write(tmp, data)
            script = 'mkdir -p -- "$(dirname -- "$2")" && cat -- "$1" > "$2"; rc=$?; rm -f -- "$1"; exit $rc'
            r = self.client.exec(["/bin/sh", "-c", script, "sh", tmp, path], timeout=300)
        except BaseException:
            self._remove_tmp(tmp)
            raise
        return None if r.ok else _shell_transfer_error(r.stderr.decode("utf-8", "replace"))

    @_tool("transfer")
    def download_files(self, paths: list[str]) -> list[FileDownloadResponse]:
        out: list[FileDownloadResponse] = []
        for path in paths:
            if not path.startswith("/"):
                out.append(FileDownloadResponse(path=path, error="invalid_path"))
                continue
            try:
                if self._native(path):
                    out.append(FileDownloadResponse(path=path, content=self.client.read_bytes(path)))
                else:
                    out.append(self._download_outside(path))
            except DaemonError as e:
                out.append(FileDownloadResponse(path=path, error=_TRANSFER_CODES.get(e.code, "invalid_path")))
        return out

    def _download_outside(self, path: str) -> FileDownloadResponse:
        tmp = self._transfer_tmp()
        script = 'test -d "$1" && { echo "$1: Is a directory" >&2; exit 1; }; cat -- "$1" > "$2"'
        try:
            r = self.client.exec(["/bin/sh", "-c", script, "sh", path, tmp], timeout=300)
            if not r.ok:
                return FileDownloadResponse(path=path, error=_shell_transfer_error(r.stderr.decode("utf-8", "replace")))
            return FileDownloadResponse(path=path, content=self.client.read_bytes(tmp))
        finally:
            self._remove_tmp(tmp)

    async def aupload_files(self, files: list[tuple[str, bytes]]) -> list[FileUploadResponse]:
        return await asyncio.to_thread(self.upload_files, files)

    async def adownload_files(self, paths: list[str]) -> list[FileDownloadResponse]:
        return await asyncio.to_thread(self.download_files, paths)


__all__ = ["DeepboxSandbox"]
