"""Shared fixtures of the MCP tests: the deepbox binary, a private state
directory (so the sandboxes of a test are its own), and `deepbox mcp` over
Streamable HTTP."""

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import pytest

BIN_DIR = os.environ.get("DEEPBOX_BIN_DIR", "")
DEEPBOX = os.path.join(BIN_DIR, "deepbox")


def run_deepbox(state, *args, check=True, timeout=120):
    env = dict(os.environ, DEEPBOX_STATE_DIR=state)
    return subprocess.run([DEEPBOX, *args], env=env, capture_output=True, text=True,
                          check=check, timeout=timeout)


def sandbox_ids(state):
    out = run_deepbox(state, "sandbox", "ls", "-q").stdout
    return [line.strip() for line in out.splitlines() if line.strip()]


def wait_until(predicate, timeout=60.0, what="condition"):
    """Polls `predicate` until it holds; fails the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    pytest.fail(f"timed out waiting for: {what}")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def state():
    if not os.access(DEEPBOX, os.X_OK):
        pytest.skip(f"no deepbox binary at {DEEPBOX}")
    d = tempfile.mkdtemp(prefix="dbx-mcp-", dir="/tmp")
    try:
        yield d
    finally:
        run_deepbox(d, "sandbox", "rm", "--selector", "deepbox.dev/mcp", check=False)
        shutil.rmtree(d, ignore_errors=True)


class HttpServer:
    def __init__(self, state, token, extra_args=()):
        self.port = free_port()
        self.token = token
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        env = dict(os.environ, DEEPBOX_STATE_DIR=state)
        if token:
            env["DEEPBOX_MCP_TOKEN"] = token
        args = [DEEPBOX, "mcp", "--listen", f"127.0.0.1:{self.port}", "--ttl", "900", *extra_args]
        if not token:
            args.append("--no-auth")
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(args, env=env, stdout=self.log, stderr=self.log)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"deepbox mcp exited: {self.output()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("deepbox mcp did not listen")

    def output(self):
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


@pytest.fixture
def http_server(state):
    server = HttpServer(state, "test-token-0123456789")
    try:
        yield server
    finally:
        server.stop()
