"""deepbox's agent (`deepbox run`) as the client of an MCP server written with
the official Python SDK (sdk_tools_server.py): over stdio on the host, over
stdio inside the sandbox, over Streamable HTTP, and one that crashes mid-call.
The model is a scripted replay (src/agent/model/README.md) or, where the test
must see what the model was sent, a fake Anthropic API on loopback; the tools
and servers are real."""

import http.server
import json
import os
import secrets
import socket
import subprocess
import sys
import sysconfig
import threading
import time

import pytest

from conftest import DEEPBOX, free_port, run_deepbox

HERE = os.path.dirname(os.path.abspath(__file__))
SERVER = os.path.join(HERE, "sdk_tools_server.py")


def replay(path, calls):
    """A scripted model that makes `calls` (one turn each), then answers "done"."""
    lines = [{"deepbox_replay": 1, "scripted": True, "model": "anthropic:claude-sonnet-4-6"}]
    for i, (name, args) in enumerate(calls):
        lines.append({"response": {"text": "", "tool_calls": [
            {"id": f"toolu_mcp_{i}", "name": name, "input": args}]}})
    lines.append({"response": {"text": "done"}})
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))


def run_agent(state, tmp_path, servers, calls, model=None, extra_env=None, extra_args=()):
    """`deepbox run` with `servers` as its .mcp.json. The model is a replay of
    `calls` unless `model` (a --model spec, with `extra_env`) is given."""
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": servers}))
    if model is None:
        rec = tmp_path / "rec.jsonl"
        replay(rec, calls)
        model = f"replay:{rec}"
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = dict(os.environ, DEEPBOX_STATE_DIR=state, HOME=str(home),
               XDG_CONFIG_HOME=str(home / ".config"), XDG_STATE_HOME=str(home / ".state"))
    for k in ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "OPENAI_API_KEY", "OPENAI_BASE_URL",
              "DEEPBOX_CONFIG"):
        env.pop(k, None)
    env.update(extra_env or {})
    p = subprocess.run(
        [DEEPBOX, "run", "--json", "--model", model, "--mcp-config", str(config),
         "--skills", "none", "--memory-file", "none", *extra_args, "use the MCP tools"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    events = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    return p, events


def tool_ends(events, tool):
    return [e for e in events if e.get("type") == "tool_call_end" and e.get("tool") == tool]


def notices(events):
    return [e["text"] for e in events if e.get("type") == "notice"]


class FakeAnthropic:
    """The Anthropic Messages API on 127.0.0.1, streaming (SSE) one scripted
    tool call, then "done" once the request carries a tool result. Records
    every request body, so a test sees exactly what the model was sent."""

    def __init__(self, tool, args):
        self.requests = []
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                fake.requests.append(body)
                last = body["messages"][-1]
                answered = isinstance(last.get("content"), list) and any(
                    b.get("type") == "tool_result" for b in last["content"])
                events = [("message_start", {"type": "message_start", "message": {
                    "id": "msg_fake", "type": "message", "role": "assistant", "content": [],
                    "model": "claude-sonnet-4-6",
                    "usage": {"input_tokens": 10, "output_tokens": 0}}})]
                if answered:
                    events += [
                        ("content_block_start", {"type": "content_block_start", "index": 0,
                                                 "content_block": {"type": "text", "text": ""}}),
                        ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                                 "delta": {"type": "text_delta", "text": "done"}}),
                        ("content_block_stop", {"type": "content_block_stop", "index": 0})]
                    stop = "end_turn"
                else:
                    events += [
                        ("content_block_start", {"type": "content_block_start", "index": 0,
                                                 "content_block": {"type": "tool_use",
                                                                   "id": "toolu_fake_1",
                                                                   "name": tool, "input": {}}}),
                        ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                                 "delta": {"type": "input_json_delta",
                                                           "partial_json": json.dumps(args)}}),
                        ("content_block_stop", {"type": "content_block_stop", "index": 0})]
                    stop = "tool_use"
                events += [("message_delta", {"type": "message_delta",
                                              "delta": {"stop_reason": stop},
                                              "usage": {"output_tokens": 5}}),
                           ("message_stop", {"type": "message_stop"})]
                out = "".join(f"event: {e}\ndata: {json.dumps(d)}\n\n" for e, d in events)
                data = out.encode()
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()

    def run_args(self):
        """run_agent's arguments that make `deepbox run` use this fake."""
        return {"model": "anthropic:claude-sonnet-4-6",
                "extra_env": {"ANTHROPIC_API_KEY": "sk-ant-fake", "ANTHROPIC_BASE_URL": self.url}}


def offered(request):
    return [t["name"] for t in request.get("tools", [])]


def tool_result_texts(request):
    """The text of the tool results at the end of a Messages API request."""
    texts = []
    for block in request["messages"][-1].get("content", []):
        if isinstance(block, dict) and block.get("type") == "tool_result":
            content = block.get("content")
            if isinstance(content, str):
                texts.append(content)
            else:
                texts += [c.get("text", "") for c in content or [] if isinstance(c, dict)]
    return texts


def test_stdio_server_on_the_host(state, tmp_path):
    p, events = run_agent(state, tmp_path,
                          {"sdk": {"command": sys.executable, "args": [SERVER]}},
                          [("mcp__sdk__echo", {"text": "hello"})])
    assert p.returncode == 0, p.stderr
    ends = tool_ends(events, "mcp__sdk__echo")
    assert len(ends) == 1, p.stdout
    assert ends[0]["ok"], ends[0]
    assert "sdk says: hello" in ends[0]["output_preview"]
    assert events[-1]["final_text"] == "done"


def test_streamable_http_server(state, tmp_path):
    port = free_port()
    log = open(tmp_path / "server.log", "w")
    server = subprocess.Popen([sys.executable, SERVER, "http", str(port)], stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert server.poll() is None, (tmp_path / "server.log").read_text()
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "the SDK server did not listen"
                time.sleep(0.05)
        p, events = run_agent(
            state, tmp_path, {"web": {"type": "http", "url": f"http://127.0.0.1:{port}/mcp"}},
            [("mcp__web__echo", {"text": "over http"})])
    finally:
        server.terminate()
        server.wait(30)
    assert p.returncode == 0, p.stderr
    ends = tool_ends(events, "mcp__web__echo")
    assert len(ends) == 1 and ends[0]["ok"], p.stdout
    assert "sdk says: over http" in ends[0]["output_preview"]


def test_a_server_that_crashes_is_reported_once_and_its_tools_withdrawn(state, tmp_path):
    fake = FakeAnthropic("mcp__sdk__crash", {})
    try:
        p, events = run_agent(state, tmp_path,
                              {"sdk": {"command": sys.executable, "args": [SERVER]}},
                              [], **fake.run_args())
    finally:
        fake.stop()
    assert p.returncode == 0, p.stderr
    stopped = [n for n in notices(events) if "MCP server 'sdk' stopped" in n]
    assert len(stopped) == 1, notices(events)
    assert "withdrawn" in stopped[0]
    crash = tool_ends(events, "mcp__sdk__crash")
    assert len(crash) == 1 and not crash[0]["ok"], p.stdout
    assert events[-1]["final_text"] == "done"
    # The model was offered the server's tools, got an error for the call
    # that killed it, and then no longer sees any of its tools.
    assert len(fake.requests) == 2, [r["messages"][-1] for r in fake.requests]
    assert {"mcp__sdk__crash", "mcp__sdk__echo"} <= set(offered(fake.requests[0]))
    assert not [t for t in offered(fake.requests[1]) if t.startswith("mcp__sdk__")], \
        offered(fake.requests[1])
    assert "execute" in offered(fake.requests[1])
    result = tool_result_texts(fake.requests[1])
    assert len(result) == 1 and "sdk says" not in result[0], result


def test_a_server_that_cannot_start_is_reported_and_the_run_goes_on(state, tmp_path):
    p, events = run_agent(state, tmp_path,
                          {"gone": {"command": "/nonexistent/mcp-server"}}, [])
    assert p.returncode == 0, p.stderr
    assert any("MCP server 'gone'" in n and "did not start" in n for n in notices(events)), \
        notices(events)


def test_stdio_server_inside_the_sandbox(state, tmp_path):
    """`"sandbox": true`: the SDK server runs inside the agent's sandbox (as the
    sandbox user, with its hostname and its /workspace), and what it returns
    reaches the model. The sandbox cannot see the host's venv, so the test
    copies the venv's site-packages (pure Python plus extensions built for
    the same python3 the sandbox has, as a local sandbox shares the host's
    system directories) and the server into the sandbox's /workspace, and runs
    the agent there with --sandbox-id."""
    sid = run_deepbox(state, "sandbox", "create", "--ttl", "600",
                      "-l", "deepbox.dev/mcp=agent-client").stdout.strip()
    fake = None
    try:
        version = run_deepbox(state, "sandbox", "exec", sid, "--", "python3", "-c",
                              "import sys; print(*sys.version_info[:2])").stdout.split()
        assert version == [str(sys.version_info[0]), str(sys.version_info[1])], (
            f"the sandbox's python3 is {version}, the venv's {sys.version_info[:2]}: "
            "the venv's compiled modules (pydantic_core) would not load there")
        run_deepbox(state, "sandbox", "cp", sysconfig.get_paths()["purelib"],
                    f"{sid}:/workspace/site")
        run_deepbox(state, "sandbox", "cp", SERVER, f"{sid}:/workspace/sdk_tools_server.py")
        marker = "only-in-the-sandbox-" + secrets.token_hex(8)
        (tmp_path / "marker.txt").write_text(marker + "\n")
        run_deepbox(state, "sandbox", "cp", str(tmp_path / "marker.txt"),
                    f"{sid}:/workspace/marker.txt")

        fake = FakeAnthropic("mcp__jailed__where", {})
        p, events = run_agent(
            state, tmp_path,
            {"jailed": {"command": "python3", "args": ["/workspace/sdk_tools_server.py"],
                        "env": {"PYTHONPATH": "/workspace/site"}, "sandbox": True}},
            [], extra_args=["--sandbox-id", sid], **fake.run_args())
        assert p.returncode == 0, p.stderr
        started = [n for n in notices(events) if n.startswith("MCP server jailed:")]
        assert len(started) == 1 and "stdio in the sandbox" in started[0], notices(events)
        ends = tool_ends(events, "mcp__jailed__where")
        assert len(ends) == 1 and ends[0]["ok"], p.stdout
        assert events[-1]["final_text"] == "done"

        assert len(fake.requests) == 2, [r["messages"][-1] for r in fake.requests]
        assert "mcp__jailed__where" in offered(fake.requests[0]), offered(fake.requests[0])
        seen = tool_result_texts(fake.requests[1])
        assert len(seen) == 1, fake.requests[1]["messages"][-1]
        # The sandbox user (not this test's uid), the sandbox's hostname (its
        # id), and a file that exists only in the sandbox's /workspace.
        assert f"uid=1000 hostname={sid} marker={marker}" in seen[0], seen
        assert os.getuid() != 1000
        assert not os.path.exists("/workspace/marker.txt")
        # --sandbox-id leaves the sandbox to its owner.
        assert sid in run_deepbox(state, "sandbox", "ls", "-q").stdout
    finally:
        if fake:
            fake.stop()
        run_deepbox(state, "sandbox", "rm", sid, check=False)
    assert sid not in run_deepbox(state, "sandbox", "ls", "-q").stdout
