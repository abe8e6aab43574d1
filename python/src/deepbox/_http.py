"""HTTP/1.1 to the daemon over a unix socket or TCP, standard library only.

One keep-alive connection per thread (``http.client`` connections are not
thread-safe); a connection the daemon closed while idle is replaced once,
transparently.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import urllib.parse
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from deepbox.errors import DaemonUnavailableError, ProtocolError, daemon_error

# The daemon answers every request quickly except exec (bounded by its own
# timeout, which callers add to this) and large transfers.
DEFAULT_TIMEOUT_S = 300.0
# A stream event line longer than this is refused (a hostile or broken daemon
# must not make the client buffer without bound); data chunks are 64 KiB.
MAX_LINE_BYTES = 16 << 20
# The most a buffered (JSON) answer may hold unless a request says otherwise
# (an exec or read that asked for big output gets a cap to match): a broken or
# impersonated daemon must not make the client buffer without bound.
MAX_ANSWER_BYTES = 64 << 20


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, socket_path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._socket_path = socket_path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout)
            sock.connect(self._socket_path)
        except BaseException:
            sock.close()
            raise
        self.sock = sock


class Endpoint:
    """Where a daemon listens: ``unix:/path``, a socket path, or ``http://host:port[/prefix]``."""

    def __init__(self, address: str, *, token: str | None = None, headers: Mapping[str, str] | None = None) -> None:
        self.address = address
        self.headers: dict[str, str] = dict(headers or {})
        if token:
            self.headers["Authorization"] = f"Bearer {token}"
        if address.startswith(("http://", "https://")):
            url = urllib.parse.urlsplit(address)
            if url.scheme == "https":
                # Kept out on purpose: the router is reached over loopback or
                # inside a cluster; TLS would need certificate configuration.
                raise ValueError("https endpoints are not supported; use http:// or a unix socket")
            self.unix_path = None
            self.host = url.hostname or "127.0.0.1"
            self.port = url.port or 80
            self.prefix = url.path.rstrip("/")
        else:
            self.unix_path = address[len("unix:") :] if address.startswith("unix:") else address
            self.host = ""
            self.port = 0
            self.prefix = ""

    def __repr__(self) -> str:
        return f"Endpoint({self.address!r})"

    def connect(self, timeout: float) -> http.client.HTTPConnection:
        if self.unix_path is not None:
            return _UnixHTTPConnection(self.unix_path, timeout)
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)


class Response:
    """A streamed answer: read it, or iterate its lines; close it when done."""

    def __init__(self, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse, owner: Transport) -> None:
        self._conn = conn
        self._resp = resp
        self._owner = owner
        self.status = resp.status
        self.headers = resp.headers

    def read(self, n: int = -1) -> bytes:
        return self._resp.read(n) if n >= 0 else self._resp.read()

    @property
    def content_length(self) -> int | None:
        """The answer's declared ``Content-Length`` (None when chunked or absent)."""
        value = self.headers.get("Content-Length")
        try:
            return int(value) if value is not None else None
        except ValueError:
            return None

    def read_capped(self, max_bytes: int, what: str) -> bytes:
        """The whole answer, refused with ``ProtocolError`` beyond ``max_bytes``.

        A declared length over the cap is refused before any of the body is
        read; a chunked answer is read up to one byte more than the cap. The
        connection is closed on refusal (the rest is never read).
        """
        declared = self.content_length
        if declared is not None and declared > max_bytes:
            self._abandon()
            raise ProtocolError(
                f"the daemon's answer to {what} declares {declared} bytes, more than this client's cap of "
                f"{_size(max_bytes)} (a broken or impersonated daemon?)"
            )
        data = self._resp.read(max_bytes + 1)
        if len(data) > max_bytes or (not self._resp.isclosed() and self._resp.read(1)):
            self._abandon()
            raise ProtocolError(
                f"the daemon's answer to {what} exceeds this client's cap of {_size(max_bytes)} "
                "(a broken or impersonated daemon?)"
            )
        return data

    def _abandon(self) -> None:
        self._resp.close()
        self._conn.close()

    def shutdown(self) -> None:
        """Cuts the connection at once, from any thread (a blocked reader sees EOF).

        Never blocks and takes no lock, so a signal handler may call it.
        """
        sock = self._conn.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def read1(self, n: int = 65536) -> bytes:
        return self._resp.read1(n)

    def lines(self) -> Iterator[bytes]:
        while True:
            line = self._resp.readline(MAX_LINE_BYTES + 1)
            if not line:
                return
            if len(line) > MAX_LINE_BYTES:
                raise ProtocolError(f"a stream line exceeds {MAX_LINE_BYTES} bytes")
            yield line

    def close(self) -> None:
        # A fully read answer leaves the connection reusable; anything else
        # (an abandoned stream) must not be reused.
        if self._resp.isclosed():
            self._owner._release(self._conn)
        else:
            self._resp.close()
            self._conn.close()


class Transport:
    """Requests to one daemon, safe to share between threads."""

    def __init__(self, endpoint: Endpoint, *, timeout: float = DEFAULT_TIMEOUT_S) -> None:
        self.endpoint = endpoint
        self.timeout = timeout
        self._local = threading.local()

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def _acquire(self, timeout: float) -> tuple[http.client.HTTPConnection, bool]:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            self._local.conn = None
            conn.timeout = timeout
            if conn.sock is not None:
                conn.sock.settimeout(timeout)
            return conn, True
        return self.endpoint.connect(timeout), False

    def _release(self, conn: http.client.HTTPConnection) -> None:
        if getattr(self._local, "conn", None) is None:
            self._local.conn = conn
        else:
            conn.close()

    def open(
        self,
        method: str,
        path: str,
        body: bytes | Iterable[bytes] | None = None,
        *,
        headers: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> Response:
        """Sends a request and returns its answer unread (status and headers known)."""
        all_headers = dict(self.endpoint.headers)
        if headers:
            all_headers.update(headers)
        target = self.endpoint.prefix + path
        t = self.timeout if timeout is None else timeout
        replayable = body is None or isinstance(body, (bytes, bytearray, memoryview))
        for attempt in (0, 1):
            conn, reused = self._acquire(t)
            try:
                if body is None or isinstance(body, (bytes, bytearray, memoryview)):
                    conn.request(method, target, body=body, headers=all_headers)
                else:
                    conn.request(method, target, body=body, headers=all_headers, encode_chunked=True)
                resp = conn.getresponse()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as e:
                conn.close()
                # An idle keep-alive connection the daemon closed: try once more.
                if reused and replayable and attempt == 0:
                    continue
                raise DaemonUnavailableError(f"daemon at {self.endpoint.address} closed the connection: {e}") from e
            except (FileNotFoundError, ConnectionRefusedError) as e:
                conn.close()
                raise DaemonUnavailableError(f"daemon at {self.endpoint.address} is not reachable: {e}") from e
            except socket.timeout as e:
                conn.close()
                raise DaemonUnavailableError(f"daemon at {self.endpoint.address} did not answer within {t:g} s") from e
            except OSError as e:
                conn.close()
                raise DaemonUnavailableError(f"daemon at {self.endpoint.address}: {e}") from e
            return Response(conn, resp, self)
        raise AssertionError("unreachable")

    def request(
        self,
        method: str,
        path: str,
        body: bytes | Iterable[bytes] | None = None,
        *,
        headers: Mapping[str, str] | None = None,
        timeout: float | None = None,
        max_bytes: int = MAX_ANSWER_BYTES,
    ) -> tuple[int, bytes]:
        """Sends a request and returns (status, the whole answer); answers over ``max_bytes`` raise."""
        resp = self.open(method, path, body, headers=headers, timeout=timeout)
        try:
            data = resp.read_capped(max_bytes, f"{method} {path.split('?', 1)[0]}")
        except (OSError, http.client.HTTPException) as e:
            resp.close()
            raise DaemonUnavailableError(f"daemon at {self.endpoint.address}: answer cut: {e}") from e
        resp.close()
        return resp.status, data

    def call(
        self,
        path: str,
        payload: Mapping[str, Any],
        *,
        timeout: float | None = None,
        max_bytes: int = MAX_ANSWER_BYTES,
    ) -> dict[str, Any]:
        """POSTs a JSON body and returns the JSON answer; daemon errors raise."""
        body = json.dumps(payload, ensure_ascii=False).encode("utf-8")
        status, data = self.request(
            "POST", path, body, headers={"Content-Type": "application/json"}, timeout=timeout, max_bytes=max_bytes
        )
        return parse_json_answer(status, data)


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 and n % (1 << 20) == 0 else f"{n} bytes"


def parse_json_answer(status: int, data: bytes) -> dict[str, Any]:
    try:
        obj = json.loads(data) if data else {}
    except ValueError as e:
        raise ProtocolError(f"HTTP {status}: answer is not JSON: {data[:200]!r}") from e
    if not isinstance(obj, dict):
        raise ProtocolError(f"HTTP {status}: answer is not a JSON object: {data[:200]!r}")
    if status >= 400:
        err = obj.get("error")
        if isinstance(err, dict):
            raise daemon_error(str(err.get("code", "UNKNOWN")), str(err.get("message", "")), status)
        raise daemon_error("UNKNOWN", f"HTTP {status}: {data[:200]!r}", status)
    return obj
