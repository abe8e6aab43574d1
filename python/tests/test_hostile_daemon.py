"""The client against a fake daemon on a unix socket that answers badly."""

from __future__ import annotations

import socket
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
