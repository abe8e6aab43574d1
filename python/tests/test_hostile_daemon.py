"""The client against a fake daemon on a unix socket that answers badly."""

from __future__ import annotations

import http.server
import json
import socket
import socketserver
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from deepbox import DaemonClient, NotFoundError, ProtocolError
from deepbox._http import MAX_LINE_BYTES


def _serve(path: Path, answers: list[bytes]) -> threading.Thread:
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(str(path))
    srv.listen(1)

    def run() -> None:
        with srv:
            for answer in answers:
                conn, _ = srv.accept()
                with conn:
                    data = b""
                    while b"\r\n\r\n" not in data:
                        data += conn.recv(65536)
                    head, _, body = data.partition(b"\r\n\r\n")
                    length = next(
                        (int(ln.split(b":")[1]) for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length")),
                        0,
                    )
                    while len(body) < length:
                        body += conn.recv(65536)
                    conn.sendall(answer)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def _answer(status: str, body: bytes, ctype: str = "application/json") -> bytes:
    return (
        f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        + body
    )


@pytest.fixture
def sock(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "d.sock"


def test_error_answers_and_malformed_answers(sock: Path) -> None:
    t = _serve(
        sock,
        [
            _answer("404 Not Found", b'{"error":{"code":"NOT_FOUND","message":"no such file: /workspace/x"}}'),
            _answer("200 OK", b"not json"),
            _answer("200 OK", b"[1,2]"),
            _answer("200 OK", b'{"path":"/workspace/x","type":"file"}'),
        ],
    )
    c = DaemonClient(str(sock))
    with pytest.raises(NotFoundError) as e:
        c.stat("/workspace/x")
    assert e.value.code == "NOT_FOUND" and e.value.status == 404
    with pytest.raises(ProtocolError):
        c.stat("/workspace/x")
    with pytest.raises(ProtocolError):
        c.stat("/workspace/x")
    assert c.stat("/workspace/x").size == 0  # missing optional fields take defaults
    t.join(10)


def test_endless_stream_line_is_refused(sock: Path) -> None:
    body = b'{"type":"stdout","data":"' + b"x" * (MAX_LINE_BYTES + 10) + b'"}\n'
    _serve(sock, [_answer("200 OK", b'{"version":"0","root":"/workspace","features":[]}'),
                  _answer("200 OK", body, "application/x-ndjson")])
    c = DaemonClient(str(sock))
    with pytest.raises(ProtocolError):
        list(c.exec_stream("true"))


def test_stream_without_exit_event(sock: Path) -> None:
    _serve(sock, [_answer("200 OK", b'{"version":"0","root":"/workspace","features":[]}'),
                  _answer("200 OK", b'{"type":"stdout","data":"hi"}\n', "application/x-ndjson")])
    c = DaemonClient(str(sock))
    events = []
    with pytest.raises(ProtocolError):
        for ev in c.exec_stream("true"):
            events.append(ev)
    assert [(e.type, e.data) for e in events] == [("stdout", b"hi")]


# ---- answers too big to buffer (security audit 2026-12-03, L4) ---------------

ANSWER_BYTES = 600 << 20  # far above every cap


class _UnixHTTPServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


class _HugeAnswers(http.server.BaseHTTPRequestHandler):
    """A daemon that answers every request with 600 MiB, made as it is sent.

    A request for the file ``/workspace/chunked`` (in the raw download's query
    or the stat's JSON body) is answered chunked, without a length; any other
    with a ``Content-Length``.
    """

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass

    def _answer(self, ctype: str, head: bytes, chunked: bool) -> None:
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Content-Length", str(ANSWER_BYTES))
        self.end_headers()
        block = b" " * (1 << 20)
        sent = 0
        try:
            while sent < ANSWER_BYTES:
                piece = head if sent == 0 else block
                piece = piece[: ANSWER_BYTES - sent]
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
                sent += len(piece)
            if chunked:
                self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client hung up: what it should do
        self.close_connection = True

    def do_GET(self) -> None:  # noqa: N802
        self._answer("application/octet-stream", b"x" * (1 << 20), "chunked" in self.path)

    def do_POST(self) -> None:  # noqa: N802
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self._answer("application/json", b'{"path":"/workspace/x","pad":"', b"/chunked" in body)


CLIENT = r"""
import json, resource, sys
from deepbox import DaemonClient
c = DaemonClient(sys.argv[1])
try:
    if sys.argv[2] == "stat":
        c.stat(sys.argv[3])
    else:
        c.read_bytes(sys.argv[3], max_bytes=1 << 20)
    out = {"error": None}
except Exception as e:
    out = {"error": type(e).__name__, "message": str(e)}
out["maxrss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(out))
"""


@pytest.fixture
def huge_daemon(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "huge.sock"
    srv = _UnixHTTPServer(str(path), _HugeAnswers)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield path
    finally:
        srv.shutdown()
        srv.server_close()


@pytest.mark.parametrize(
    ("call", "target", "error", "text"),
    [
        ("stat", "/workspace/chunked", "ProtocolError", "exceeds this client's cap of 64 MiB"),
        ("stat", "/workspace/x", "ProtocolError", f"declares {ANSWER_BYTES} bytes, more than this client's cap of 64 MiB"),
        ("read_bytes", "/workspace/chunked", "FileTooLargeError", "is larger, more than max_bytes=1048576"),
        ("read_bytes", "/workspace/x", "FileTooLargeError", f"is {ANSWER_BYTES} bytes, more than max_bytes=1048576"),
    ],
)
def test_a_huge_answer_is_refused_without_buffering_it(
    huge_daemon: Path, call: str, target: str, error: str, text: str
) -> None:
    """A daemon answering 600 MiB: a clear error, and the client's memory stays
    far below the answer's size (the old client read it all: 1.2 GiB)."""
    p = subprocess.run(
        [sys.executable, "-c", CLIENT, str(huge_daemon), call, target],
        capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout)
    assert out["error"] == error, out
    assert text in out["message"], out
    assert out["maxrss_mib"] < 256, out
