"""deepbox's agent (`deepbox run`) as the client of an MCP server written with
the official Python SDK (sdk_tools_server.py): over stdio on the host, over
Streamable HTTP, and one that crashes mid-call. The model is a scripted
replay (src/agent/model/README.md); the tools and servers are real."""

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from conftest import DEEPBOX, free_port

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


def run_agent(state, tmp_path, servers, calls):
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": servers}))
    rec = tmp_path / "rec.jsonl"
    replay(rec, calls)
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = dict(os.environ, DEEPBOX_STATE_DIR=state, HOME=str(home),
               XDG_CONFIG_HOME=str(home / ".config"), XDG_STATE_HOME=str(home / ".state"))
    for k in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "DEEPBOX_CONFIG"):
        env.pop(k, None)
    p = subprocess.run(
        [DEEPBOX, "run", "--json", "--model", f"replay:{rec}", "--mcp-config", str(config),
         "--skills", "none", "--memory-file", "none", "use the MCP tools"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    events = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    return p, events


def tool_ends(events, tool):
    return [e for e in events if e.get("type") == "tool_call_end" and e.get("tool") == tool]


def notices(events):
    return [e["text"] for e in events if e.get("type") == "notice"]


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


def test_a_server_that_crashes_is_reported_once_and_the_run_goes_on(state, tmp_path):
    p, events = run_agent(state, tmp_path,
                          {"sdk": {"command": sys.executable, "args": [SERVER]}},
                          [("mcp__sdk__crash", {}), ("mcp__sdk__echo", {"text": "again"})])
    assert p.returncode == 0, p.stderr
    stopped = [n for n in notices(events) if "MCP server 'sdk' stopped" in n]
    assert len(stopped) == 1, notices(events)
    assert "withdrawn" in stopped[0]
    crash = tool_ends(events, "mcp__sdk__crash")
    echo = tool_ends(events, "mcp__sdk__echo")
    assert len(crash) == 1 and len(echo) == 1, p.stdout
    assert "sdk says" not in echo[0]["output_preview"]
    assert events[-1]["final_text"] == "done"


def test_a_server_that_cannot_start_is_reported_and_the_run_goes_on(state, tmp_path):
    p, events = run_agent(state, tmp_path,
                          {"gone": {"command": "/nonexistent/mcp-server"}}, [])
    assert p.returncode == 0, p.stderr
    assert any("MCP server 'gone'" in n and "did not start" in n for n in notices(events)), \
        notices(events)
