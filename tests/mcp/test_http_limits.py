"""The HTTP transport's walls against a real `deepbox mcp --listen` process, with
raw sockets and the official MCP Python SDK (audit 2026-12-03, M4 and L3):

* the bearer token and Origin are checked on the request head, so clients
  without a token that announce and send big bodies cost the server no memory;
* the largest legitimate upload (upload_file at its announced maximum) still
  passes through the smaller body cap;
* the Host header must name the loopback listener, and a loopback Origin must
  carry its port."""

import base64
import hashlib
import os
import re
import socket
import threading

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client


def status_field(pid, key):
    """A field of /proc/PID/status in kB (VmRSS, VmHWM)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise AssertionError(f"no {key} in /proc/{pid}/status")


def exchange(port, request, timeout=60):
    """Sends raw bytes and returns everything the server answers until it closes
    (after a refusal, or the request says Connection: close). No half-close:
    the server takes that for a client gone and cancels its call."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(request)
        out = b""
        while True:
            try:
                data = s.recv(65536)
            except ConnectionResetError:
                break
            if not data:
                break
            out += data
        return out.decode(errors="replace")


def status_of(response):
    m = re.match(r"HTTP/1\.1 (\d{3}) ", response)
    return int(m.group(1)) if m else 0


class Upload:
    """One connection that announces `declared` bytes of body without a token
    and sends `send` of them as fast as the server takes them, then holds the
    connection open; its reader collects the answer meanwhile."""

    def __init__(self, port, declared, send):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=120)
        self.declared = declared
        self.send = send
        self.sent = 0
        self.answer = b""
        self.head = (f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                     f"Content-Type: application/json\r\nAccept: application/json\r\n"
                     f"Content-Length: {declared}\r\n\r\n").encode()
        self.sender = threading.Thread(target=self._send)
        self.reader = threading.Thread(target=self._read)

    def start(self):
        self.reader.start()
        self.sender.start()

    def _send(self):
        chunk = b"x" * (1 << 20)
        try:
            self.sock.sendall(self.head)
            while self.sent < self.send:
                self.sock.sendall(chunk)
                self.sent += len(chunk)
        except OSError:
            pass  # the server answered and closed: the rest is not wanted

    def _read(self):
        try:
            while True:
                data = self.sock.recv(65536)
                if not data:
                    return
                self.answer += data
        except OSError:
            return

    def close(self):
        self.sock.close()


def test_unauthenticated_uploads_cost_the_server_no_memory(http_server):
    pid = http_server.proc.pid
    # One refused request first, so that what any request allocates once (a
    # thread's arena) is in the baseline.
    assert status_of(exchange(http_server.port,
                              f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{http_server.port}\r\n"
                              "Connection: close\r\nContent-Length: 2\r\n\r\n{}".encode())) == 401
    before = status_field(pid, "VmRSS")

    # The audit's reproduction: 6 connections, each announcing 64 MiB - 1 and
    # sending 60 MiB, then holding. The server used to buffer all of it
    # (+520 MiB) and keep it while the connections were held.
    uploads = [Upload(http_server.port, (64 << 20) - 1, 60 << 20) for _ in range(6)]
    peak = [before]
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], status_field(pid, "VmRSS"))
            done.wait(0.02)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        for u in uploads:
            u.start()
        for u in uploads:
            u.sender.join(300)
            assert not u.sender.is_alive(), "a sender is still blocked"
        # Every sender is done and every connection still open on our side:
        # what the server holds now is what it kept of the bodies.
        holding = status_field(pid, "VmRSS")
        done.set()
        sampler.join()
        grown = max(holding, peak[0]) - before
        assert grown < 8 * 1024, (
            f"the server's VmRSS grew by {grown} kB (from {before} kB; {holding} kB while the "
            f"connections were held) for {len(uploads)} unauthenticated uploads")
        for u in uploads:
            u.reader.join(120)
            assert not u.reader.is_alive(), "no answer to an unauthenticated upload"
            answer = u.answer.decode(errors="replace")
            assert status_of(answer) == 401, answer[:300]
            assert "Connection: close" in answer, answer[:300]
    finally:
        done.set()
        for u in uploads:
            u.close()
    assert http_server.proc.poll() is None


def test_the_largest_upload_still_passes(http_server):
    headers = {"Authorization": f"Bearer {http_server.token}"}

    async def main():
        transport = streamable_http_client(
            http_server.url, http_client=httpx2.AsyncClient(headers=headers, timeout=300))
        async with Client(transport) as client:
            tools = await client.list_tools()
            upload = next(t for t in tools.tools if t.name == "upload_file")
            limit = int(re.search(r"At most (\d+) bytes", upload.description).group(1))
            blob = os.urandom(limit)
            # A stateless client has no default sandbox: it names one it made.
            created = await client.call_tool("sandbox_create", {})
            assert not created.is_error, created.content[0].text
            sid = created.structured_content["sandbox_id"]
            up = await client.call_tool("upload_file", {
                "file_path": "big.bin", "content_base64": base64.b64encode(blob).decode(),
                "sandbox_id": sid})
            assert not up.is_error, up.content[0].text
            assert up.structured_content["size"] == limit
            check = await client.call_tool("execute", {"command": "sha256sum big.bin",
                                                       "sandbox_id": sid})
            assert hashlib.sha256(blob).hexdigest() in check.content[0].text
            # A byte more than the tool takes is the tool's error, not the transport's.
            over = await client.call_tool("upload_file", {
                "file_path": "over.bin", "sandbox_id": sid,
                "content_base64": base64.b64encode(blob + b"0123").decode()})
            assert over.is_error
            assert f"larger than {limit} bytes" in over.content[0].text

    anyio.run(main)


def test_host_and_origin_must_name_the_listener(http_server):
    port = http_server.port
    body = ('{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{'
            '"io.modelcontextprotocol/protocolVersion":"2026-07-28",'
            '"io.modelcontextprotocol/clientCapabilities":{}}}}')

    def post(host, origin=None):
        extra = f"Origin: {origin}\r\n" if origin else ""
        return exchange(port, (
            f"POST /mcp HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Accept: application/json\r\nAuthorization: Bearer {http_server.token}\r\n"
            f"MCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/list\r\n{extra}"
            f"Connection: close\r\nContent-Length: {len(body)}\r\n\r\n{body}").encode())

    assert status_of(post(f"127.0.0.1:{port}")) == 200
    assert status_of(post(f"localhost:{port}")) == 200
    # The audit: Host evil.test was served (200, a session id).
    refused = post(f"evil.test:{port}")
    assert status_of(refused) == 421, refused[:300]
    assert f"Host 'evil.test:{port}' does not name this server" in refused
    assert status_of(post(f"localhost:{port + 1}")) == 421
    # Any local port passed as an Origin; only the listener's does now.
    refused = post(f"127.0.0.1:{port}", origin="http://localhost:9999")
    assert status_of(refused) == 403, refused[:300]
    assert "a loopback origin must have this server's port" in refused
    assert status_of(post(f"127.0.0.1:{port}", origin=f"http://localhost:{port}")) == 200
    assert status_of(post(f"127.0.0.1:{port}", origin="null")) == 403
    assert status_of(post(f"127.0.0.1:{port}", origin="http://evil.test")) == 403
