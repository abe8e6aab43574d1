"""A client of one sandbox's daemon (``deepbox-sandboxd``): processes and files.

The API is documented in docs/sandboxd-api.md. Every method is one request
(``upload_many``/``download_many`` are one request per file); none of them
starts a process in the sandbox except ``exec``/``exec_stream``.
"""

from __future__ import annotations

import base64
import json
import urllib.parse
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from deepbox._http import MAX_ANSWER_BYTES, Endpoint, Response, Transport, parse_json_answer
from deepbox.errors import DaemonError, ExecCancelledError, FileTooLargeError, ProtocolError

# Seconds added to a command's own timeout before the HTTP request gives up:
# the daemon kills the command at its timeout and answers right after.
_EXEC_SLACK_S = 30.0
# An error answer is a short JSON object.
_ERROR_ANSWER_BYTES = 1 << 20
# Listings and searches whose size the sandbox's files decide (a directory of
# a million entries, a grep with many matches): the C++ client's cap.
_LISTING_ANSWER_BYTES = 512 << 20


def _json_cap(payload_bytes: int | None) -> int:
    """The cap on a JSON answer that carries up to ``payload_bytes`` of content.

    JSON text escapes a byte as at most 6 (``\\u00XX``); the fixed part is the
    usual cap.
    """
    return MAX_ANSWER_BYTES + 6 * max(0, payload_bytes or 0)


@dataclass
class ExecResult:
    """How a command ended.

    ``status`` is ``exited``, ``signaled``, ``timed_out``, ``killed`` or
    ``spawn_failed`` (then ``error`` says why). Output is bytes, exact.
    """

    status: str
    exit_code: int | None
    signal: int
    stdout: bytes
    stderr: bytes
    output: bytes  # stdout and stderr interleaved as produced
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    output_truncated: bool = False
    duration_ms: int = 0
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == "exited" and self.exit_code == 0

    @property
    def truncated(self) -> bool:
        return self.stdout_truncated or self.stderr_truncated or self.output_truncated

    @property
    def returncode(self) -> int:
        """A shell-style code: the exit code, 128+N for signal N, 124 for a timeout, 127 when it could not start."""
        if self.status == "exited" and self.exit_code is not None:
            return self.exit_code
        if self.status == "timed_out":
            return 124
        if self.status == "spawn_failed":
            return 127
        if self.signal:
            return 128 + self.signal
        return 137 if self.status == "killed" else 1

    @property
    def text(self) -> str:
        """The interleaved output as text (invalid UTF-8 replaced)."""
        return self.output.decode("utf-8", errors="replace")


class ExecCancel:
    """Stops a running ``exec``/``exec_stream`` from another thread or a signal handler.

    ``cancel()`` cuts the command's connection; the daemon then kills the
    command's process group (at its next output, or within its 2 s keepalive)
    and the call raises ``ExecCancelledError``. One object per command;
    ``cancel()`` before the command starts keeps it from starting. Lock-free,
    so a signal handler may call it.
    """

    def __init__(self) -> None:
        self.cancelled = False
        self._resp: Response | None = None

    def cancel(self) -> None:
        self.cancelled = True
        resp = self._resp
        if resp is not None:
            resp.shutdown()

    def _attach(self, resp: Response) -> None:
        self._resp = resp
        if self.cancelled:  # cancelled meanwhile (cancel() saw no connection yet)
            resp.shutdown()

    def _detach(self) -> None:
        self._resp = None


@dataclass
class StreamEvent:
    """One event of a streamed command: ``stdout``/``stderr`` with ``data``, or ``exit`` with ``result``."""

    type: str
    data: bytes = b""
    result: ExecResult | None = None


@dataclass
class FileInfo:
    path: str
    name: str
    type: str  # file, directory, symlink, other
    size: int
    mode: str
    modified_at: str
    link_target: str | None = None

    @property
    def is_dir(self) -> bool:
        return self.type == "directory"


@dataclass
class ReadResult:
    """A read: ``content`` (text) or ``data`` (bytes, with ``encoding="base64"``)."""

    path: str
    size: int
    binary: bool
    truncated: bool
    content: str | None = None
    data: bytes | None = None
    total_lines: int | None = None
    start_line: int | None = None
    lines_returned: int | None = None
    more_lines: bool | None = None


@dataclass
class GrepMatch:
    path: str
    line: int
    text: str
    text_truncated: bool = False


@dataclass
class GrepResult:
    matches: list[GrepMatch] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    truncated: bool = False


def _b64(value: Any, name: str) -> bytes:
    if not isinstance(value, str):
        raise ProtocolError(f"field '{name}' is not a string")
    try:
        return base64.b64decode(value, validate=True)
    except ValueError as e:
        raise ProtocolError(f"field '{name}' is not base64") from e


def _exec_result(obj: Mapping[str, Any]) -> ExecResult:
    def out(name: str) -> bytes:
        if f"{name}_base64" in obj:
            return _b64(obj[f"{name}_base64"], f"{name}_base64")
        value = obj.get(name, "")
        return value.encode("utf-8") if isinstance(value, str) else b""

    code = obj.get("exit_code")
    status = obj.get("status")
    if not isinstance(status, str):
        raise ProtocolError(f"exec answer without a status: {str(obj)[:200]}")
    return ExecResult(
        status=status,
        exit_code=code if isinstance(code, int) and not isinstance(code, bool) else None,
        signal=obj.get("signal") if isinstance(obj.get("signal"), int) else 0,
        stdout=out("stdout"),
        stderr=out("stderr"),
        output=out("output"),
        stdout_truncated=bool(obj.get("stdout_truncated")),
        stderr_truncated=bool(obj.get("stderr_truncated")),
        output_truncated=bool(obj.get("output_truncated")),
        duration_ms=obj.get("duration_ms") if isinstance(obj.get("duration_ms"), int) else 0,
        error=obj.get("error") if isinstance(obj.get("error"), str) else None,
    )


def _file_info(obj: Any) -> FileInfo:
    if not isinstance(obj, dict) or not isinstance(obj.get("path"), str):
        raise ProtocolError(f"malformed file info: {str(obj)[:200]}")
    return FileInfo(
        path=obj["path"],
        name=str(obj.get("name", "")),
        type=str(obj.get("type", "other")),
        size=obj.get("size") if isinstance(obj.get("size"), int) else 0,
        mode=str(obj.get("mode", "")),
        modified_at=str(obj.get("modified_at", "")),
        link_target=obj.get("link_target") if isinstance(obj.get("link_target"), str) else None,
    )


class DaemonClient:
    """Talks to one daemon. Thread-safe (one keep-alive connection per thread).

    Args:
        address: ``unix:/path/to/sandboxd.sock``, a socket path, or
            ``http://host:port`` (e.g. a sandbox router).
        token: Bearer token, when the daemon or router wants one.
        headers: Sent with every request (e.g. the router's ``X-Sandbox-ID``).
        timeout: Seconds a request may take (exec adds its own timeout).
    """

    def __init__(
        self,
        address: str,
        *,
        token: str | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float = 300.0,
    ) -> None:
        self.endpoint = Endpoint(address, token=token, headers=headers)
        self.transport = Transport(self.endpoint, timeout=timeout)
        self._info: dict[str, Any] | None = None

    def close(self) -> None:
        self.transport.close()

    # ---- service ----------------------------------------------------------

    def health(self) -> dict[str, Any]:
        status, data = self.transport.request("GET", "/deepbox/v1/health")
        return parse_json_answer(status, data)

    def info(self, *, refresh: bool = False) -> dict[str, Any]:
        """The daemon's version, root, limits and ``features`` (cached)."""
        if self._info is None or refresh:
            status, data = self.transport.request("GET", "/deepbox/v1/info")
            self._info = parse_json_answer(status, data)
        return self._info

    @property
    def root(self) -> str:
        """The directory every file path is confined to (e.g. ``/workspace``)."""
        root = self.info().get("root")
        return root if isinstance(root, str) and root.startswith("/") else "/workspace"

    def has_feature(self, name: str) -> bool:
        features = self.info().get("features")
        return isinstance(features, list) and name in features

    # ---- processes --------------------------------------------------------

    def _exec_body(
        self,
        command: str | Sequence[str],
        *,
        cwd: str | None,
        env: Mapping[str, str] | None,
        stdin: bytes | str | None,
        timeout: float | None,
        max_output_bytes: int | None,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {}
        if isinstance(command, str):
            body["shell"] = command
        else:
            argv = list(command)
            if not argv:
                raise ValueError("empty argv")
            body["argv"] = argv
        if cwd is not None:
            body["cwd"] = cwd
        if env:
            body["env"] = dict(env)
        if stdin is not None:
            raw = stdin.encode("utf-8") if isinstance(stdin, str) else bytes(stdin)
            body["stdin_base64"] = base64.b64encode(raw).decode("ascii")
        if timeout is not None:
            if timeout < 0:
                raise ValueError(f"timeout must be >= 0, got {timeout}")
            # 0 keeps the daemon's default; anything else is at least 1 ms.
            body["timeout_ms"] = max(1, int(timeout * 1000)) if timeout > 0 else 0
        if max_output_bytes is not None:
            body["max_output_bytes"] = int(max_output_bytes)
        if self.has_feature("exec_output_base64"):
            body["output_encoding"] = "base64"
        return body

    def _http_timeout(self, timeout: float | None) -> float:
        if timeout:
            return timeout + _EXEC_SLACK_S
        limits = self.info().get("limits")
        default_ms = limits.get("default_timeout_ms") if isinstance(limits, dict) else None
        if isinstance(default_ms, int) and default_ms > 0:
            return default_ms / 1000 + _EXEC_SLACK_S
        return 24 * 3600.0

    def exec(
        self,
        command: str | Sequence[str],
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        stdin: bytes | str | None = None,
        timeout: float | None = None,
        max_output_bytes: int | None = None,
        on_output: Callable[[str, bytes], None] | None = None,
        cancel: ExecCancel | None = None,
    ) -> ExecResult:
        """Runs a command to completion.

        Args:
            command: A shell string (``/bin/sh -c``) or an argv list (exec'd directly).
            cwd: Working directory (default: the daemon's root).
            env: Added to the daemon's environment.
            stdin: Bytes fed to stdin, then closed.
            timeout: Seconds; then the process group is killed (``status ==
                "timed_out"``). ``None`` or 0: the daemon's default.
            max_output_bytes: Cap per stream; the rest is drained and counted.
            on_output: Called as ``on_output("stdout"|"stderr", chunk)`` while
                the command runs (the output is streamed).
            cancel: An :class:`ExecCancel` that stops the command from another
                thread (the output is streamed; ``ExecCancelledError`` is raised).
        """
        if cancel is not None:
            return self._exec_collected(
                command, cwd=cwd, env=env, stdin=stdin, timeout=timeout, max_output_bytes=max_output_bytes,
                on_output=on_output, cancel=cancel,
            )
        if on_output is not None:
            result: ExecResult | None = None
            for ev in self.exec_stream(
                command, cwd=cwd, env=env, stdin=stdin, timeout=timeout, max_output_bytes=max_output_bytes
            ):
                if ev.type == "exit":
                    result = ev.result
                elif ev.type in ("stdout", "stderr"):
                    on_output(ev.type, ev.data)
            if result is None:
                raise ProtocolError("the output stream ended without an exit event")
            return result
        body = self._exec_body(
            command, cwd=cwd, env=env, stdin=stdin, timeout=timeout, max_output_bytes=max_output_bytes
        )
        # stdout, stderr and their interleaving: up to 4 times the per-stream cap.
        cap = _json_cap(4 * max_output_bytes) if max_output_bytes else MAX_ANSWER_BYTES
        return _exec_result(
            self.transport.call("/deepbox/v1/exec", body, timeout=self._http_timeout(timeout), max_bytes=cap)
        )

    def _exec_collected(
        self,
        command: str | Sequence[str],
        *,
        cwd: str | None,
        env: Mapping[str, str] | None,
        stdin: bytes | str | None,
        timeout: float | None,
        max_output_bytes: int | None,
        on_output: Callable[[str, bytes], None] | None,
        cancel: ExecCancel,
    ) -> ExecResult:
        """``exec`` over the stream (cancellable), keeping the output like ``/exec`` does.

        The stream carries all the output: the per-stream cap (the request's,
        else the daemon's) is applied here, and the rest counted as truncated.
        """
        if max_output_bytes is None:
            limits = self.info().get("limits")
            default = limits.get("max_output_bytes") if isinstance(limits, dict) else None
            cap = default if isinstance(default, int) and default > 0 else 1 << 20
        else:
            cap = max(0, int(max_output_bytes))
        kept: dict[str, bytearray] = {"stdout": bytearray(), "stderr": bytearray(), "output": bytearray()}
        cut = {"stdout": False, "stderr": False, "output": False}

        def keep(name: str, data: bytes) -> None:
            buf = kept[name]
            room = cap - len(buf)
            if len(data) > room:
                cut[name] = True
                data = data[: max(0, room)]
            buf += data

        result: ExecResult | None = None
        for ev in self.exec_stream(
            command, cwd=cwd, env=env, stdin=stdin, timeout=timeout, max_output_bytes=max_output_bytes, cancel=cancel
        ):
            if ev.type == "exit":
                result = ev.result
            elif ev.type in ("stdout", "stderr"):
                keep(ev.type, ev.data)
                keep("output", ev.data)
                if on_output is not None:
                    on_output(ev.type, ev.data)
        if result is None:
            raise ProtocolError("the output stream ended without an exit event")
        result.stdout, result.stderr, result.output = bytes(kept["stdout"]), bytes(kept["stderr"]), bytes(kept["output"])
        result.stdout_truncated = result.stdout_truncated or cut["stdout"]
        result.stderr_truncated = result.stderr_truncated or cut["stderr"]
        result.output_truncated = result.output_truncated or cut["output"]
        return result

    def exec_stream(
        self,
        command: str | Sequence[str],
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        stdin: bytes | str | None = None,
        timeout: float | None = None,
        max_output_bytes: int | None = None,
        include_keepalive: bool = False,
        cancel: ExecCancel | None = None,
    ) -> Iterator[StreamEvent]:
        """Runs a command and yields its output as it is produced.

        Yields ``StreamEvent("stdout"|"stderr", data)`` chunks, then one
        ``StreamEvent("exit", result=...)`` (whose result carries no output).
        Closing the iterator early kills the command (the daemon kills it
        when its client goes away); so does ``cancel.cancel()`` from another
        thread, after which the iterator raises ``ExecCancelledError``.
        """
        body = self._exec_body(
            command, cwd=cwd, env=env, stdin=stdin, timeout=timeout, max_output_bytes=max_output_bytes
        )
        payload = json.dumps(body, ensure_ascii=False).encode("utf-8")
        if cancel is not None and cancel.cancelled:
            raise ExecCancelledError("the command was cancelled before it started")
        resp = self.transport.open(
            "POST",
            "/deepbox/v1/exec/stream",
            payload,
            headers={"Content-Type": "application/json"},
            timeout=self._http_timeout(timeout),
        )
        if cancel is not None:
            cancel._attach(resp)
        try:
            if resp.status >= 400:
                parse_json_answer(resp.status, resp.read_capped(_ERROR_ANSWER_BYTES, "POST /deepbox/v1/exec/stream"))
                raise ProtocolError(f"HTTP {resp.status} without an error body")
            for raw in resp.lines():
                line = raw.strip()
                if not line:
                    continue
                try:
                    ev = json.loads(line)
                except ValueError as e:
                    raise ProtocolError(f"malformed stream event: {line[:200]!r}") from e
                if not isinstance(ev, dict):
                    raise ProtocolError(f"malformed stream event: {line[:200]!r}")
                kind = ev.get("type")
                if kind in ("stdout", "stderr"):
                    if "data_base64" in ev:
                        data = _b64(ev["data_base64"], "data_base64")
                    else:
                        text = ev.get("data", "")
                        data = text.encode("utf-8") if isinstance(text, str) else b""
                    yield StreamEvent(kind, data)
                elif kind == "keepalive":
                    if include_keepalive:
                        yield StreamEvent("keepalive")
                elif kind == "exit":
                    yield StreamEvent("exit", result=_exec_result(ev))
                    return
                elif kind == "error" and isinstance(ev.get("error"), dict):
                    err = ev["error"]
                    parse_json_answer(500, json.dumps({"error": err}).encode())
            raise ProtocolError("the output stream ended without an exit event")
        except Exception as e:
            if cancel is not None and cancel.cancelled:
                raise ExecCancelledError("the command was cancelled; the daemon kills its process group") from e
            raise
        finally:
            if cancel is not None:
                cancel._detach()
            resp.close()

    # ---- files ------------------------------------------------------------

    def stat(self, path: str) -> FileInfo:
        return _file_info(self.transport.call("/deepbox/v1/fs/stat", {"path": path}))

    def exists(self, path: str) -> bool:
        try:
            self.stat(path)
        except DaemonError as e:
            if e.code == "NOT_FOUND":
                return False
            raise
        return True

    def ls(self, path: str = "") -> list[FileInfo]:
        """The entries of a directory, sorted by name."""
        obj = self.transport.call("/deepbox/v1/fs/list", {"path": path or self.root}, max_bytes=_LISTING_ANSWER_BYTES)
        entries = obj.get("entries")
        if not isinstance(entries, list):
            raise ProtocolError("list answer without entries")
        return [_file_info(e) for e in entries]

    def read(
        self,
        path: str,
        *,
        offset: int | None = None,
        limit: int | None = None,
        max_bytes: int | None = None,
        binary: bool = False,
    ) -> ReadResult:
        """Reads a file: a line window (``offset``/``limit``, 0-based lines), or the whole file.

        Lines come without terminators (``\\n`` or ``\\r\\n``), joined by
        ``\\n``. ``binary=True`` returns the bytes in ``data`` instead of text.
        """
        body: dict[str, Any] = {"path": path}
        if offset is not None:
            body["line_offset"] = max(0, int(offset))
        if limit is not None:
            body["line_limit"] = max(0, int(limit))
        if max_bytes is not None:
            body["max_bytes"] = int(max_bytes)
        if binary:
            body["encoding"] = "base64"
        obj = self.transport.call("/deepbox/v1/fs/read", body, max_bytes=_json_cap(max_bytes))
        r = ReadResult(
            path=str(obj.get("path", path)),
            size=obj.get("size") if isinstance(obj.get("size"), int) else 0,
            binary=bool(obj.get("binary")),
            truncated=bool(obj.get("truncated")),
        )
        if "content_base64" in obj:
            r.data = _b64(obj["content_base64"], "content_base64")
        else:
            content = obj.get("content")
            if not isinstance(content, str):
                raise ProtocolError("read answer without content")
            r.content = content
        if "total_lines" in obj:
            r.total_lines = obj.get("total_lines") if isinstance(obj.get("total_lines"), int) else None
            r.start_line = obj.get("start_line") if isinstance(obj.get("start_line"), int) else None
            r.lines_returned = obj.get("lines_returned") if isinstance(obj.get("lines_returned"), int) else None
            r.more_lines = bool(obj.get("more_lines"))
        return r

    def read_text(self, path: str) -> str:
        r = self.read(path)
        return r.content or ""

    def read_bytes(self, path: str, *, max_bytes: int | None = None) -> bytes:
        """The whole file in memory.

        ``max_bytes``: a file larger than this raises ``FileTooLargeError``
        (refused on the declared size before anything is read, else as soon
        as more arrives); ``None``: no cap (use :meth:`download_stream` for a
        file that need not be held in memory).
        """
        return b"".join(self.download_stream(path, max_bytes=max_bytes))

    def download_stream(
        self, path: str, chunk_size: int = 1 << 20, *, max_bytes: int | None = None
    ) -> Iterator[bytes]:
        """Yields a file's bytes as they arrive (``FileTooLargeError`` beyond ``max_bytes``)."""
        q = urllib.parse.urlencode({"path": path})
        resp = self.transport.open("GET", f"/deepbox/v1/fs/raw?{q}")
        try:
            if resp.status >= 400:
                parse_json_answer(resp.status, resp.read_capped(_ERROR_ANSWER_BYTES, "GET /deepbox/v1/fs/raw"))
                raise ProtocolError(f"HTTP {resp.status} without an error body")
            declared = resp.content_length
            if max_bytes is not None and declared is not None and declared > max_bytes:
                raise FileTooLargeError(path, max_bytes, declared)
            seen = 0
            while True:
                chunk = resp.read1(chunk_size if max_bytes is None else min(chunk_size, max_bytes - seen + 1))
                if not chunk:
                    break
                seen += len(chunk)
                if max_bytes is not None and seen > max_bytes:
                    raise FileTooLargeError(path, max_bytes, None)
                yield chunk
        finally:
            resp.close()

    def write(
        self,
        path: str,
        content: str | bytes | Iterable[bytes],
        *,
        mode: int | None = None,
    ) -> int:
        """Writes a file atomically (parents created); returns its size.

        ``content`` may be text, bytes, or an iterable of byte chunks (streamed
        to the daemon, any size).
        """
        params: dict[str, str] = {"path": path}
        if mode is not None:
            params["mode"] = format(mode, "04o")
        q = urllib.parse.urlencode(params)
        if isinstance(content, str):
            content = content.encode("utf-8")
        body: bytes | Iterable[bytes] = bytes(content) if isinstance(content, (bytearray, memoryview)) else content
        status, data = self.transport.request(
            "PUT", f"/deepbox/v1/fs/raw?{q}", body, headers={"Content-Type": "application/octet-stream"}
        )
        obj = parse_json_answer(status, data)
        size = obj.get("size")
        return size if isinstance(size, int) else 0

    def edit(self, path: str, old_string: str, new_string: str, *, replace_all: bool = False) -> int:
        """Replaces ``old_string`` (unique unless ``replace_all``); returns the count."""
        obj = self.transport.call(
            "/deepbox/v1/fs/edit",
            {"path": path, "old_string": old_string, "new_string": new_string, "replace_all": replace_all},
        )
        n = obj.get("occurrences")
        return n if isinstance(n, int) else 0

    def mkdir(self, path: str, *, parents: bool = True) -> str:
        return str(self.transport.call("/deepbox/v1/fs/mkdir", {"path": path, "parents": parents}).get("path", path))

    def move(self, src: str, dst: str, *, overwrite: bool = False) -> str:
        obj = self.transport.call("/deepbox/v1/fs/move", {"from": src, "to": dst, "overwrite": overwrite})
        return str(obj.get("path", dst))

    def delete(self, path: str, *, recursive: bool = False) -> None:
        self.transport.call("/deepbox/v1/fs/delete", {"path": path, "recursive": recursive})

    def glob(self, pattern: str, path: str | None = None, *, max_results: int | None = None) -> tuple[list[str], bool]:
        """Files matching ``pattern`` under ``path`` (deepagents semantics); returns (paths, truncated)."""
        body: dict[str, Any] = {"pattern": pattern}
        if path:
            body["path"] = path
        if max_results is not None:
            body["max_results"] = int(max_results)
        obj = self.transport.call("/deepbox/v1/fs/glob", body, max_bytes=_LISTING_ANSWER_BYTES)
        paths = obj.get("paths")
        if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
            raise ProtocolError("glob answer without paths")
        return paths, bool(obj.get("truncated"))

    def grep(
        self,
        pattern: str,
        path: str | None = None,
        *,
        glob: str | None = None,
        regex: bool = False,
        case_insensitive: bool = False,
        output_mode: str = "content",
        max_count: int | None = None,
    ) -> GrepResult:
        """Searches file contents (a literal string unless ``regex``)."""
        body: dict[str, Any] = {
            "pattern": pattern,
            "regex": regex,
            "case_insensitive": case_insensitive,
            "output_mode": output_mode,
        }
        if path:
            body["path"] = path
        if glob:
            body["glob"] = glob
        if max_count is not None:
            body["max_count"] = int(max_count)
        obj = self.transport.call("/deepbox/v1/fs/grep", body, max_bytes=_LISTING_ANSWER_BYTES)
        out = GrepResult(truncated=bool(obj.get("truncated")))
        for m in obj.get("matches") or []:
            if isinstance(m, dict) and isinstance(m.get("path"), str) and isinstance(m.get("line"), int):
                out.matches.append(
                    GrepMatch(m["path"], m["line"], str(m.get("text", "")), bool(m.get("text_truncated")))
                )
        out.files = [f for f in obj.get("files") or [] if isinstance(f, str)]
        for c in obj.get("counts") or []:
            if isinstance(c, dict) and isinstance(c.get("path"), str) and isinstance(c.get("count"), int):
                out.counts[c["path"]] = c["count"]
        return out

    def upload_many(self, files: Iterable[tuple[str, bytes]]) -> list[DaemonError | None]:
        """Writes many files; one result per file (None, or the error), in order."""
        results: list[DaemonError | None] = []
        for path, data in files:
            try:
                self.write(path, data)
                results.append(None)
            except DaemonError as e:
                results.append(e)
        return results

    def download_many(self, paths: Iterable[str]) -> list[bytes | DaemonError]:
        """Reads many files; one result per path (bytes, or the error), in order."""
        results: list[bytes | DaemonError] = []
        for path in paths:
            try:
                results.append(self.read_bytes(path))
            except DaemonError as e:
                results.append(e)
        return results
