"""`deepbox acp` driven by the official ACP Python SDK (agent-client-protocol,
pinned in requirements-test.txt) as the editor, over stdio, against a scripted
model (``--model replay:FILE``): the tools run for real in real sandboxes.

Each test gets its own deepbox state directory, so "no sandbox left behind"
is checked with ``deepbox sandbox ls`` on exactly that state.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

acp = pytest.importorskip("acp")
from acp import spawn_agent_process, text_block  # noqa: E402
from acp.schema import (  # noqa: E402
    AllowedOutcome,
    ClientCapabilities,
    CreateTerminalResponse,
    DeniedOutcome,
    FileSystemCapabilities,
    ReadTextFileResponse,
    ReleaseTerminalResponse,
    RequestPermissionResponse,
    TerminalExitStatus,
    TerminalOutputResponse,
    WaitForTerminalExitResponse,
    WriteTextFileResponse,
)

from conftest import require_sandboxes  # noqa: E402

HEADER = {
    "deepbox_replay": 1,
    "scripted": True,
    "model": "anthropic:claude-sonnet-4-6",
    "description": "test_acp.py: a scripted conversation",
}


def write_replay(path: Path, turns: list[dict[str, Any]]) -> str:
    lines = [json.dumps(HEADER)] + [json.dumps({"response": t}) for t in turns]
    path.write_text("\n".join(lines) + "\n")
    return f"replay:{path}"


def call(call_id: str, name: str, **args: Any) -> dict[str, Any]:
    return {"id": call_id, "name": name, "input": args}


class Editor:
    """The client side: answers permissions by file, reads and writes the real
    files, and records every session update."""

    def __init__(self, reject: set[str] | None = None, hang_on_permission: bool = False) -> None:
        self.reject = reject or set()
        self.hang_on_permission = hang_on_permission
        self.updates: list[Any] = []
        self.permissions: list[Any] = []
        self.writes: list[tuple[str, str]] = []
        self.reads: list[str] = []
        self.permission_asked = asyncio.Event()

    async def request_permission(self, session_id: str, tool_call: Any, options: list[Any], **kw: Any):
        self.permissions.append(tool_call)
        self.permission_asked.set()
        if self.hang_on_permission:
            await asyncio.sleep(3600)
        paths = [loc.path for loc in (tool_call.locations or [])]
        choice = "reject_once" if any(Path(p).name in self.reject for p in paths) else "allow_once"
        assert choice in [o.option_id for o in options]
        return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id=choice))

    async def session_update(self, session_id: str, update: Any, **kw: Any) -> None:
        self.updates.append(update)

    async def write_text_file(self, session_id: str, path: str, content: str, **kw: Any):
        self.writes.append((path, content))
        os.makedirs(os.path.dirname(path), exist_ok=True)  # as an editor saves a new file
        with open(path, "w", newline="") as f:
            f.write(content)
        return WriteTextFileResponse()

    async def read_text_file(self, session_id: str, path: str, line=None, limit=None, **kw: Any):
        self.reads.append(path)
        with open(path, newline="") as f:  # as an editor has it: CRLF stays
            return ReadTextFileResponse(content=f.read())

    def on_connect(self, conn: Any) -> None:
        pass

    # What this client does not offer.
    async def create_terminal(self, *a: Any, **kw: Any):
        raise NotImplementedError

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        return {}

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        pass

    def of_kind(self, kind: str) -> list[Any]:
        return [u for u in self.updates if getattr(u, "session_update", None) == kind]

    async def running(self, tool_call_id: str) -> None:
        """Until the tool call is reported in_progress (at most ~15 s; the
        test's own assertions then say what went wrong)."""
        for _ in range(300):
            if any(u.tool_call_id == tool_call_id and u.status == "in_progress"
                   for u in self.of_kind("tool_call") + self.of_kind("tool_call_update")):
                return
            await asyncio.sleep(0.05)


CAPS = ClientCapabilities(fs=FileSystemCapabilities(read_text_file=True, write_text_file=True))


@pytest.fixture
def env(deepbox_bin: str) -> Iterator[dict[str, str]]:
    # Short: sandbox sockets live beneath it (107 bytes at most).
    state = tempfile.mkdtemp(prefix="dbacp-", dir="/tmp")
    e = dict(os.environ)
    e["DEEPBOX_STATE_DIR"] = state
    e.pop("ANTHROPIC_API_KEY", None)
    try:
        yield e
    finally:
        for sb in sandboxes(deepbox_bin, e):  # a failed test's leftovers
            subprocess.run([deepbox_bin, "sandbox", "rm", sb["id"]], env=e, capture_output=True)
        shutil.rmtree(state, ignore_errors=True)


def sandboxes(deepbox_bin: str, env: dict[str, str]) -> list[Any]:
    out = subprocess.run(
        [deepbox_bin, "sandbox", "ls", "--json", "--selector", "deepbox.dev/acp"],
        env=env, capture_output=True, text=True, check=True,
    )
    return json.loads(out.stdout)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project with a .gitignore'd secret and a symlink to a directory
    outside it (as to ~/.ssh)."""
    outside = tmp_path / "dot-ssh"
    outside.mkdir()
    (outside / "id_ed25519").write_text("PRIVATE KEY\n")
    p = tmp_path / "project"
    p.mkdir()
    (p / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (p / "notes.txt").write_text("keep me\n")
    (p / ".gitignore").write_text("secret.env\n")
    (p / "secret.env").write_text("TOKEN=1\n")
    (p / "ssh").symlink_to(outside, target_is_directory=True)
    return p


EDIT_TURNS = [
    {"text": "Let me plan and look at the code.",
     "tool_calls": [
         call("t_plan", "write_todos", todos=[{"content": "Fix add", "status": "in_progress"},
                                              {"content": "Add a test", "status": "pending"}]),
         call("t_read", "read_file", file_path="/workspace/calc.py")]},
    {"text": "Fixing the bug.",
     "tool_calls": [call("t_edit", "edit_file", file_path="/workspace/calc.py",
                         old_string="a - b", new_string="a + b")]},
    {"tool_calls": [call("t_notes", "write_file", file_path="/workspace/notes.txt",
                         content="overwritten\n")]},
    {"tool_calls": [call("t_new", "write_file", file_path="/workspace/test_calc.py",
                         content="from calc import add\nassert add(2, 3) == 5\n")]},
    {"tool_calls": [call("t_run", "execute",
                         command="cd /workspace && python3 test_calc.py && echo TESTS-OK; ls -a")]},
    {"text": "Fixed add and added a test."},
]


def test_prompt_edits_through_the_editor(tmp_path: Path, deepbox_bin: str, env: dict[str, str],
                                         project: Path) -> None:
    model = write_replay(tmp_path / "edit.jsonl", EDIT_TURNS)
    editor = Editor(reject={"notes.txt"})

    async def run() -> tuple[str, Any]:
        async with spawn_agent_process(lambda _agent: editor, deepbox_bin, "acp", "--model", model,
                                       env=env) as (conn, proc):
            init = await conn.initialize(protocol_version=1, client_capabilities=CAPS)
            assert init.protocol_version == 1
            assert init.agent_capabilities.load_session is True
            assert init.auth_methods, "authMethods must name how the model key is supplied"
            session = await conn.new_session(cwd=str(project), mcp_servers=[])
            assert session.modes.current_mode_id == "approve-all"
            assert {m.id for m in session.modes.available_modes} == {"approve-all", "approve-execute", "auto"}
            assert len(sandboxes(deepbox_bin, env)) == 1
            resp = await conn.prompt(session_id=session.session_id, prompt=[text_block("fix add")])
            return session.session_id, resp

    session_id, resp = asyncio.run(run())
    assert resp.stop_reason == "end_turn"

    # Accepted: the edit and the new file, exactly; rejected: notes.txt unchanged.
    assert (project / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"
    assert (project / "test_calc.py").read_text() == "from calc import add\nassert add(2, 3) == 5\n"
    assert (project / "notes.txt").read_text() == "keep me\n"
    written = {Path(p).name for p, _ in editor.writes}
    assert written == {"calc.py", "test_calc.py"}

    # The editor saw the diff before it was asked.
    edit_perm = next(p for p in editor.permissions if p.tool_call_id == "t_edit")
    diff = next(c for c in edit_perm.content if c.type == "diff")
    assert diff.path == str(project / "calc.py")
    assert diff.old_text == "def add(a, b):\n    return a - b\n"
    assert diff.new_text == "def add(a, b):\n    return a + b\n"
    new_perm = next(p for p in editor.permissions if p.tool_call_id == "t_new")
    assert next(c for c in new_perm.content if c.type == "diff").old_text is None
    assert {p.tool_call_id for p in editor.permissions} == {"t_edit", "t_notes", "t_new", "t_run"}

    # Statuses and locations.
    starts = {u.tool_call_id: u for u in editor.of_kind("tool_call")}
    assert starts["t_edit"].status == "pending" and starts["t_edit"].kind == "edit"
    assert starts["t_read"].locations[0].path == str(project / "calc.py")
    finals: dict[str, str] = {}
    for u in editor.of_kind("tool_call_update"):
        if u.status:
            finals[u.tool_call_id] = u.status
    assert finals["t_edit"] == "completed"
    assert finals["t_notes"] == "failed"
    assert finals["t_new"] == "completed"
    assert finals["t_run"] == "completed"

    # The command ran in the sandbox's copy: no ignored secret, no symlink.
    run_out = "".join(
        c.content.text for u in editor.of_kind("tool_call_update") if u.tool_call_id == "t_run"
        for c in (u.content or []) if c.type == "content")
    assert "TESTS-OK" in run_out
    assert "calc.py" in run_out
    assert "secret.env" not in run_out and "ssh" not in run_out.split()

    # Streaming text and the plan.
    text = "".join(u.content.text for u in editor.of_kind("agent_message_chunk"))
    assert "Fixing the bug." in text and "Fixed add and added a test." in text
    plan = editor.of_kind("plan")[0]
    assert [(e.content, e.status) for e in plan.entries] == [("Fix add", "in_progress"),
                                                             ("Add a test", "pending")]
    assert str(project / "calc.py") in editor.reads  # the editor's buffer was consulted

    # The session's sandbox went with the connection.
    assert sandboxes(deepbox_bin, env) == []

    # session/load: the thread comes back as history, in a fresh sandbox.
    editor2 = Editor()

    async def load() -> None:
        async with spawn_agent_process(lambda _agent: editor2, deepbox_bin, "acp", "--model", model,
                                       env=env) as (conn, proc):
            await conn.initialize(protocol_version=1, client_capabilities=CAPS)
            loaded = await conn.load_session(cwd=str(project), session_id=session_id, mcp_servers=[])
            assert loaded.modes.current_mode_id == "approve-all"
            with pytest.raises(Exception) as missing:
                await conn.load_session(cwd=str(project), session_id="th-no-such-thread", mcp_servers=[])
            assert "no saved deepbox thread" in str(missing.value)

    asyncio.run(load())
    users = "".join(u.content.text for u in editor2.of_kind("user_message_chunk"))
    assert "fix add" in users
    replayed = {u.tool_call_id: u.status for u in editor2.of_kind("tool_call")}
    assert replayed["t_edit"] == "completed" and replayed["t_notes"] == "failed"
    assert sandboxes(deepbox_bin, env) == []


def test_cancel_stops_the_running_command(tmp_path: Path, deepbox_bin: str, env: dict[str, str],
                                          project: Path) -> None:
    model = write_replay(tmp_path / "sleep.jsonl", [
        {"text": "Waiting.", "tool_calls": [call("t_sleep", "execute", command="sleep 30")]},
        # By the time the prompt answered "cancelled", the command is gone.
        {"tool_calls": [call("t_ps", "execute", command="ps -eo args")]},
        {"text": "listed"},
    ])
    editor = Editor()

    async def run() -> tuple[Any, float]:
        async with spawn_agent_process(lambda _agent: editor, deepbox_bin, "acp", "--model", model,
                                       "--mode", "auto", env=env) as (conn, proc):
            await conn.initialize(protocol_version=1, client_capabilities=CAPS)
            session = await conn.new_session(cwd=str(project), mcp_servers=[])
            prompt = asyncio.create_task(
                conn.prompt(session_id=session.session_id, prompt=[text_block("wait")]))
            await editor.running("t_sleep")
            await asyncio.sleep(0.5)  # the command is running
            t0 = time.monotonic()
            await conn.cancel(session_id=session.session_id)
            resp = await asyncio.wait_for(prompt, timeout=10)
            took = time.monotonic() - t0
            # The session goes on; the cancelled command is gone from the sandbox.
            again = await conn.prompt(session_id=session.session_id, prompt=[text_block("ps")])
            assert again.stop_reason == "end_turn"
            return resp, took

    resp, took = asyncio.run(run())
    assert resp.stop_reason == "cancelled"
    assert took < 5, f"cancel took {took:.1f}s"
    finals = [u.status for u in editor.of_kind("tool_call_update") if u.tool_call_id == "t_sleep" and u.status]
    assert finals[-1] == "failed"
    ps = "".join(c.content.text for u in editor.of_kind("tool_call_update") if u.tool_call_id == "t_ps"
                 for c in (u.content or []) if c.type == "content")
    assert "ps -eo args" in ps and "sleep 30" not in ps
    assert not editor.permissions  # auto mode asks nothing
    assert sandboxes(deepbox_bin, env) == []


def test_set_mode_approve_execute_writes_without_asking(tmp_path: Path, deepbox_bin: str,
                                                         env: dict[str, str], project: Path) -> None:
    model = write_replay(tmp_path / "mode.jsonl", [
        {"tool_calls": [call("t_w", "write_file", file_path="/workspace/notes.txt", content="new\n")]},
        {"tool_calls": [call("t_x", "execute", command="true")]},
        {"text": "ok"},
    ])
    editor = Editor()

    async def run() -> None:
        async with spawn_agent_process(lambda _agent: editor, deepbox_bin, "acp", "--model", model,
                                       env=env) as (conn, proc):
            await conn.initialize(protocol_version=1, client_capabilities=CAPS)
            session = await conn.new_session(cwd=str(project), mcp_servers=[])
            await conn.set_session_mode(session_id=session.session_id, mode_id="approve-execute")
            with pytest.raises(Exception):
                await conn.set_session_mode(session_id=session.session_id, mode_id="yolo")
            resp = await conn.prompt(session_id=session.session_id, prompt=[text_block("go")])
            assert resp.stop_reason == "end_turn"

    asyncio.run(run())
    assert (project / "notes.txt").read_text() == "new\n"
    assert [p.tool_call_id for p in editor.permissions] == ["t_x"]


def raw_agent(deepbox_bin: str, model: str, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen([deepbox_bin, "acp", "--model", model], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)


def send(proc: subprocess.Popen, obj: Any) -> None:
    assert proc.stdin
    proc.stdin.write((obj if isinstance(obj, str) else json.dumps(obj)).encode() + b"\n")
    proc.stdin.flush()


def recv(proc: subprocess.Popen) -> dict[str, Any]:
    assert proc.stdout
    line = proc.stdout.readline()
    assert line, "the agent closed its stdout"
    return json.loads(line)


def test_malformed_and_unknown_requests(tmp_path: Path, deepbox_bin: str, env: dict[str, str]) -> None:
    model = write_replay(tmp_path / "none.jsonl", [{"text": "hi"}])
    proc = raw_agent(deepbox_bin, model, env)
    try:
        send(proc, "{this is not json")
        err = recv(proc)
        assert err["error"]["code"] == -32700 and err["id"] is None
        send(proc, {"jsonrpc": "2.0", "id": 7, "method": "no/such/method", "params": {}})
        err = recv(proc)
        assert err["id"] == 7 and err["error"]["code"] == -32601
        assert "no/such/method" in err["error"]["message"]
        send(proc, {"jsonrpc": "1.0", "id": 8, "method": "initialize"})
        err = recv(proc)
        assert err["id"] == 8 and err["error"]["code"] == -32600
        send(proc, {"jsonrpc": "2.0", "id": 9, "method": "session/prompt",
                    "params": {"sessionId": "nope", "prompt": []}})
        err = recv(proc)
        assert err["id"] == 9 and "no such session" in err["error"]["message"]
        send(proc, {"jsonrpc": "2.0", "id": 10, "method": "session/new",
                    "params": {"cwd": "relative/dir", "mcpServers": []}})
        err = recv(proc)
        assert err["id"] == 10 and err["error"]["code"] == -32602
        # Still serving after all that.
        send(proc, {"jsonrpc": "2.0", "id": 11, "method": "initialize", "params": {"protocolVersion": 1}})
        assert recv(proc)["result"]["protocolVersion"] == 1
    finally:
        assert proc.stdin
        proc.stdin.close()
        assert proc.wait(timeout=30) == 0


def test_missing_model_key_is_auth_required(tmp_path: Path, deepbox_bin: str, env: dict[str, str],
                                            project: Path) -> None:
    proc = subprocess.Popen([deepbox_bin, "acp", "--model", "claude-sonnet-4-6"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        send(proc, {"jsonrpc": "2.0", "id": 1, "method": "session/new",
                    "params": {"cwd": str(project), "mcpServers": []}})
        err = recv(proc)
        assert err["error"]["code"] == -32000
        assert "ANTHROPIC_API_KEY" in err["error"]["message"]
    finally:
        assert proc.stdin
        proc.stdin.close()
        proc.wait(timeout=30)
    assert sandboxes(deepbox_bin, env) == []


def test_client_that_dies_leaves_nothing(tmp_path: Path, deepbox_bin: str, env: dict[str, str],
                                         project: Path) -> None:
    model = write_replay(tmp_path / "die.jsonl", [
        {"tool_calls": [call("t_w", "write_file", file_path="/workspace/notes.txt", content="x\n")]},
        {"text": "done"},
    ])
    proc = raw_agent(deepbox_bin, model, env)
    send(proc, {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                "params": {"protocolVersion": 1,
                           "clientCapabilities": {"fs": {"readTextFile": False, "writeTextFile": True}}}})
    recv(proc)
    send(proc, {"jsonrpc": "2.0", "id": 2, "method": "session/new",
                "params": {"cwd": str(project), "mcpServers": []}})
    sid = recv(proc)["result"]["sessionId"]
    assert len(sandboxes(deepbox_bin, env)) == 1
    send(proc, {"jsonrpc": "2.0", "id": 3, "method": "session/prompt",
                "params": {"sessionId": sid, "prompt": [{"type": "text", "text": "write"}]}})
    while True:
        msg = recv(proc)
        if msg.get("method") == "session/request_permission":
            break
    # The editor dies without answering.
    assert proc.stdin and proc.stdout
    proc.stdin.close()
    proc.stdout.close()
    assert proc.wait(timeout=30) == 0
    assert (project / "notes.txt").read_text() == "keep me\n"
    assert sandboxes(deepbox_bin, env) == []


def test_symlink_out_of_the_project_is_not_copied(tmp_path: Path, deepbox_bin: str,
                                                  env: dict[str, str], project: Path) -> None:
    home_ssh = tmp_path / "home" / ".ssh"
    home_ssh.mkdir(parents=True)
    (home_ssh / "id_rsa").write_text("KEY\n")
    (project / "dot-ssh-link").symlink_to(home_ssh, target_is_directory=True)
    model = write_replay(tmp_path / "ls.jsonl", [
        {"tool_calls": [call("t_ls", "execute",
                             command="ls -la /workspace; cat /workspace/dot-ssh-link/id_rsa; "
                                     "cat /workspace/ssh/id_ed25519; true")]},
        {"text": "listed"},
    ])
    editor = Editor()

    async def run() -> None:
        async with spawn_agent_process(lambda _agent: editor, deepbox_bin, "acp", "--model", model,
                                       "--mode", "auto", env=env) as (conn, proc):
            await conn.initialize(protocol_version=1, client_capabilities=CAPS)
            session = await conn.new_session(cwd=str(project), mcp_servers=[])
            await conn.prompt(session_id=session.session_id, prompt=[text_block("ls")])

    asyncio.run(run())
    out = "".join(c.content.text for u in editor.of_kind("tool_call_update")
                  for c in (u.content or []) if c.type == "content")
    listed = [line.split()[-1] for line in out.splitlines() if line.startswith(("-", "d", "l"))]
    assert "calc.py" in listed
    assert "dot-ssh-link" not in listed and "ssh" not in listed and "secret.env" not in listed
    assert "KEY" not in out  # neither key file's content reached the sandbox
    assert "dot-ssh-link/id_rsa: No such file or directory" in out


# A stdio MCP server (the 2025-06-18 handshake) with one tool, `shout`:
# copied with the project, started inside the sandbox.
MCP_SERVER = r'''
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if "id" not in m:
        continue
    if m["method"] == "initialize":
        r = {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
             "serverInfo": {"name": "shout", "version": "1"}}
    elif m["method"] == "tools/list":
        r = {"tools": [{"name": "shout", "description": "upper-cases text",
                        "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}},
                                        "required": ["text"]}}]}
    elif m["method"] == "tools/call":
        import os
        text = m["params"]["arguments"]["text"].upper() + " from " + os.getcwd()
        r = {"content": [{"type": "text", "text": text}]}
    else:
        print(json.dumps({"jsonrpc": "2.0", "id": m["id"], "error": {"code": -32601, "message": "no"}}), flush=True)
        continue
    print(json.dumps({"jsonrpc": "2.0", "id": m["id"], "result": r}), flush=True)
'''


def test_client_mcp_server_runs_in_the_sandbox_and_allow_always(
        tmp_path: Path, deepbox_bin: str, env: dict[str, str], project: Path) -> None:
    (project / "shout_server.py").write_text(MCP_SERVER)
    model = write_replay(tmp_path / "mcp.jsonl", [
        {"tool_calls": [call("t_mcp", "mcp__shout__shout", text="hello")]},
        {"tool_calls": [call("t_a", "write_file", file_path="/workspace/a.txt", content="a\n")]},
        {"tool_calls": [call("t_b", "write_file", file_path="/workspace/b.txt", content="b\n")]},
        {"text": "done"},
    ])
    editor = Editor()

    async def always(session_id: str, tool_call: Any, options: list[Any], **kw: Any):
        editor.permissions.append(tool_call)
        return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id="allow_always"))

    editor.request_permission = always  # type: ignore[method-assign]

    async def run() -> None:
        from acp.schema import McpServerStdio
        async with spawn_agent_process(lambda _agent: editor, deepbox_bin, "acp", "--model", model,
                                       env=env) as (conn, proc):
            await conn.initialize(protocol_version=1, client_capabilities=CAPS)
            server = McpServerStdio(name="shout", command="python3",
                                    args=["/workspace/shout_server.py"], env=[])
            session = await conn.new_session(cwd=str(project), mcp_servers=[server])
            resp = await conn.prompt(session_id=session.session_id, prompt=[text_block("go")])
            assert resp.stop_reason == "end_turn"

    asyncio.run(run())
    out = "".join(c.content.text for u in editor.of_kind("tool_call_update") if u.tool_call_id == "t_mcp"
                  for c in (u.content or []) if c.type == "content")
    assert "HELLO from /workspace" in out  # ran in the sandbox, on the copy
    # "Always allow" for the first file change: the second is not asked.
    assert [p.tool_call_id for p in editor.permissions] == ["t_mcp", "t_a"]
    assert (project / "a.txt").read_text() == "a\n" and (project / "b.txt").read_text() == "b\n"


def test_ignored_files_never_come_from_the_editor(tmp_path: Path, deepbox_bin: str,
                                                  env: dict[str, str], project: Path) -> None:
    """secret.env is .gitignore'd: not copied, never fetched through the editor
    into the sandbox, but an overwrite shows its real text as the diff's old
    side (to the editor only)."""
    model = write_replay(tmp_path / "secret.jsonl", [
        {"tool_calls": [call("t_make", "execute", command="echo A=1 > /workspace/secret.env")]},
        {"tool_calls": [call("t_read", "read_file", file_path="/workspace/secret.env")]},
        {"tool_calls": [call("t_over", "write_file", file_path="/workspace/secret.env", content="B=2\n")]},
        {"text": "done"},
    ])
    editor = Editor(reject={"secret.env"})

    async def run() -> None:
        async with spawn_agent_process(lambda _agent: editor, deepbox_bin, "acp", "--model", model,
                                       "--mode", "approve-all", env=env) as (conn, proc):
            await conn.initialize(protocol_version=1, client_capabilities=CAPS)
            session = await conn.new_session(cwd=str(project), mcp_servers=[])
            await conn.prompt(session_id=session.session_id, prompt=[text_block("go")])

    asyncio.run(run())
    read = "".join(c.content.text for u in editor.of_kind("tool_call_update") if u.tool_call_id == "t_read"
                   for c in (u.content or []) if c.type == "content")
    assert "A=1" in read and "TOKEN" not in read
    over = next(p for p in editor.permissions if p.tool_call_id == "t_over")
    diff = next(c for c in over.content if c.type == "diff")
    assert diff.old_text == "TOKEN=1\n" and diff.new_text == "B=2\n"
    assert (project / "secret.env").read_text() == "TOKEN=1\n"
    assert not editor.writes


def test_sigterm_mid_command_leaves_nothing(tmp_path: Path, deepbox_bin: str, env: dict[str, str],
                                            project: Path) -> None:
    import signal

    model = write_replay(tmp_path / "term.jsonl", [
        {"tool_calls": [call("t_sleep", "execute", command="sleep 30")]},
        {"text": "never"},
    ])
    proc = subprocess.Popen([deepbox_bin, "acp", "--model", model, "--mode", "auto"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    send(proc, {"jsonrpc": "2.0", "id": 1, "method": "session/new",
                "params": {"cwd": str(project), "mcpServers": []}})
    sid = recv(proc)["result"]["sessionId"]
    send(proc, {"jsonrpc": "2.0", "id": 2, "method": "session/prompt",
                "params": {"sessionId": sid, "prompt": [{"type": "text", "text": "wait"}]}})
    while True:
        update = recv(proc).get("params", {}).get("update", {})
        if update.get("toolCallId") == "t_sleep" and update.get("status") == "in_progress":
            break
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=15) == 0
    assert sandboxes(deepbox_bin, env) == []


def test_a_result_unlike_the_shown_diff_is_asked_again(tmp_path: Path, deepbox_bin: str,
                                                      env: dict[str, str], project: Path) -> None:
    """The daemon matches an edit across CRLF/LF; deepbox's preview does not:
    the user is asked first without a diff, then about the real result."""
    (project / "crlf.txt").write_bytes(b"one\r\ntwo\r\n")
    model = write_replay(tmp_path / "crlf.jsonl", [
        {"tool_calls": [call("t_crlf", "edit_file", file_path="/workspace/crlf.txt",
                             old_string="one\ntwo", new_string="1\n2")]},
        {"text": "done"},
    ])
    editor = Editor()

    async def run() -> None:
        async with spawn_agent_process(lambda _agent: editor, deepbox_bin, "acp", "--model", model,
                                       env=env) as (conn, proc):
            await conn.initialize(protocol_version=1, client_capabilities=CAPS)
            session = await conn.new_session(cwd=str(project), mcp_servers=[])
            await conn.prompt(session_id=session.session_id, prompt=[text_block("go")])

    asyncio.run(run())
    asked = [p for p in editor.permissions if p.tool_call_id == "t_crlf"]
    assert len(asked) == 2
    assert not [c for c in (asked[0].content or []) if c.type == "diff"]
    second = next(c for c in asked[1].content if c.type == "diff")
    assert second.old_text == "one\r\ntwo\r\n"
    assert (project / "crlf.txt").read_bytes() == second.new_text.encode()


def test_what_a_command_changes_is_proposed_to_the_editor(tmp_path: Path, deepbox_bin: str,
                                                         env: dict[str, str], project: Path) -> None:
    """Files a command changed in the sandbox are proposed like the file
    tools' edits: accepted ones are written through the editor, a rejected
    one goes back to the project's text in the sandbox, a new file .gitignore
    keeps out and a binary one stay in the sandbox, a deletion is said."""
    (project / ".gitignore").write_text("secret.env\n*.log\nnode_modules/\n")
    (project / "old.txt").write_text("old\n")
    model = write_replay(tmp_path / "cmd.jsonl", [
        {"tool_calls": [call("t_cmd", "execute", command=(
            "cd /workspace && sed -i 's/a - b/a + b/' calc.py && echo more >> notes.txt"
            " && echo fresh > new.txt && mkdir -p pkg && echo 'x = 1' > pkg/mod.py"
            " && echo noise > debug.log && printf '\\000\\001' > blob.bin && rm old.txt"
            " && mkdir -p node_modules/dep && echo 'module.exports = 1' > node_modules/dep/i.js"
            " && mkdir ssh && echo attacker > ssh/id_ed25519"))]},
        # ssh is a link out of the project on the host (to "~/.ssh"): the
        # editor, which follows links, must never be asked to write there.
        {"tool_calls": [call("t_key", "write_file", file_path="/workspace/ssh/authorized_keys",
                             content="attacker\n")]},
        {"tool_calls": [call("t_check", "execute", command=(
            "cd /workspace && cat notes.txt && ls"))]},
        {"text": "done"},
    ])
    editor = Editor(reject={"notes.txt"})

    async def run() -> None:
        async with spawn_agent_process(lambda _agent: editor, deepbox_bin, "acp", "--model", model,
                                       env=env) as (conn, proc):
            await conn.initialize(protocol_version=1, client_capabilities=CAPS)
            session = await conn.new_session(cwd=str(project), mcp_servers=[])
            resp = await conn.prompt(session_id=session.session_id, prompt=[text_block("go")])
            assert resp.stop_reason == "end_turn"

    asyncio.run(run())
    # Accepted: exactly the command's text, through the editor.
    assert (project / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"
    assert (project / "new.txt").read_text() == "fresh\n"
    assert (project / "pkg/mod.py").read_text() == "x = 1\n"
    # Rejected, ignored, binary, deleted: the project is as it was.
    assert (project / "notes.txt").read_text() == "keep me\n"
    assert not (project / "debug.log").exists()
    assert not (project / "blob.bin").exists()
    assert not (project / "node_modules").exists()
    outside = project.parent / "dot-ssh"
    assert sorted(os.listdir(outside)) == ["id_ed25519"]
    assert (outside / "id_ed25519").read_text() == "PRIVATE KEY\n"
    assert not any("ssh" in Path(p).parts for p in editor.reads + [w for w, _ in editor.writes])
    assert (project / "old.txt").read_text() == "old\n"
    assert {Path(p).relative_to(project).as_posix() for p, _ in editor.writes} == {
        "calc.py", "new.txt", "pkg/mod.py"}

    # Each change was shown as a diff of the project's text, then asked.
    proposals = {p.locations[0].path: p for p in editor.permissions
                 if p.tool_call_id.startswith("t_cmd/")}
    assert set(proposals) == {str(project / f) for f in ("calc.py", "notes.txt", "new.txt",
                                                          "pkg/mod.py")}
    key = [u for u in editor.of_kind("tool_call_update") if u.tool_call_id == "t_key" and u.status]
    assert key[-1].status == "completed"
    assert "not a project file" in tool_text(editor, "t_key")
    calc = next(c for c in proposals[str(project / "calc.py")].content if c.type == "diff")
    assert calc.old_text == "def add(a, b):\n    return a - b\n"
    assert calc.new_text == "def add(a, b):\n    return a + b\n"
    new = next(c for c in proposals[str(project / "new.txt")].content if c.type == "diff")
    assert new.old_text is None and new.new_text == "fresh\n"
    finals: dict[str, str] = {}
    for u in editor.of_kind("tool_call_update"):
        if u.status:
            finals[u.tool_call_id] = u.status
    by_path = {p.locations[0].path: p.tool_call_id for p in proposals.values()}
    assert finals[by_path[str(project / "notes.txt")]] == "failed"
    assert finals[by_path[str(project / "calc.py")]] == "completed"
    deleted = [u for u in editor.of_kind("tool_call") if u.tool_call_id == "t_cmd/deleted"]
    assert len(deleted) == 1 and deleted[0].locations[0].path == str(project / "old.txt")
    assert "old.txt" in deleted[0].title

    # The sandbox agrees with the project again: the rejected file has the
    # project's text; the ignored and binary files are still there; the
    # second command changed nothing, so nothing more was proposed.
    out = command_output(editor, "t_check")
    assert "keep me\n" in out and "more" not in out, out
    assert "debug.log" in out and "blob.bin" in out and "node_modules" in out
    assert not [p for p in editor.permissions if p.tool_call_id.startswith("t_check/")]
    assert sandboxes(deepbox_bin, env) == []


def test_usage_updates_report_the_context_and_the_cost(tmp_path: Path, deepbox_bin: str,
                                                       env: dict[str, str], project: Path) -> None:
    """After each model call: usage_update with the tokens in context against
    the model's window and the session's cost so far; the prompt's response
    carries the turn's token counts."""
    model = write_replay(tmp_path / "usage.jsonl", [
        {"tool_calls": [call("t_ls", "ls", path="/workspace")],
         "usage": {"input_tokens": 1000, "output_tokens": 50, "cache_read_tokens": 200}},
        {"text": "done", "usage": {"input_tokens": 1500, "output_tokens": 20}},
    ])
    editor = Editor()
    responses: list[Any] = []

    async def run() -> None:
        async with spawn_agent_process(lambda _agent: editor, deepbox_bin, "acp", "--model", model,
                                       env=env) as (conn, proc):
            await conn.initialize(protocol_version=1, client_capabilities=CAPS)
            session = await conn.new_session(cwd=str(project), mcp_servers=[])
            responses.append(await conn.prompt(session_id=session.session_id,
                                               prompt=[text_block("go")]))

    asyncio.run(run())
    updates = editor.of_kind("usage_update")
    assert [(u.used, u.size) for u in updates] == [(1250, 200000), (1520, 200000)]
    assert all(u.cost and u.cost.currency == "USD" for u in updates)
    assert 0 < updates[0].cost.amount < updates[1].cost.amount < 0.05
    usage = responses[0].usage
    assert (usage.input_tokens, usage.output_tokens, usage.cached_read_tokens) == (2700, 70, 200)
    assert usage.total_tokens == 2770


def sandbox_mode(deepbox_bin: str, env: dict[str, str]) -> str:
    """The one session sandbox's lifecycle mode ("running" unless said)."""
    (sb,) = sandboxes(deepbox_bin, env)
    mode, requested = sb.get("mode", "running"), sb.get("requested_mode", "running")
    return mode if mode == requested else f"{mode}, becoming {requested}"


async def wait_for_mode(deepbox_bin: str, env: dict[str, str], want: str) -> None:
    seen = ""
    for _ in range(300):  # generous: only that it happens is checked
        seen = await asyncio.to_thread(sandbox_mode, deepbox_bin, env)
        if seen == want:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"the session's sandbox stayed {seen}, never {want}")


class ModeRecordingEditor(Editor):
    """Records the sandbox's mode when a tool call starts running (a prompt
    is under way then)."""

    def __init__(self, deepbox_bin: str, env: dict[str, str]) -> None:
        super().__init__()
        self.deepbox_bin = deepbox_bin
        self.env = env
        self.mode_at_start: dict[str, str] = {}

    async def session_update(self, session_id: str, update: Any, **kw: Any) -> None:
        await super().session_update(session_id, update, **kw)
        call_id = getattr(update, "tool_call_id", None)
        if call_id and getattr(update, "status", None) == "in_progress":
            self.mode_at_start[call_id] = await asyncio.to_thread(sandbox_mode, self.deepbox_bin,
                                                                  self.env)


def command_output(editor: Editor, call_id: str) -> str:
    return "".join(c.content.text for u in editor.of_kind("tool_call_update")
                   if u.tool_call_id == call_id for c in (u.content or []) if c.type == "content")


def test_idle_session_is_paused_and_the_next_prompt_resumes_it(
        tmp_path: Path, deepbox_bin: str, env: dict[str, str], project: Path) -> None:
    model = write_replay(tmp_path / "idle.jsonl", [
        {"tool_calls": [call("t_first", "execute", command="echo first > /tmp/kept; cat /tmp/kept")]},
        {"text": "first done"},
        {"tool_calls": [call("t_again", "execute", command="echo again; cat /tmp/kept")]},
        {"text": "again done"},
    ])
    editor = ModeRecordingEditor(deepbox_bin, env)

    async def run() -> None:
        async with spawn_agent_process(lambda _agent: editor, deepbox_bin, "acp", "--model", model,
                                       "--mode", "auto", "--idle-pause", "1", env=env) as (conn, proc):
            await conn.initialize(protocol_version=1, client_capabilities=CAPS)
            session = await conn.new_session(cwd=str(project), mcp_servers=[])
            first = await conn.prompt(session_id=session.session_id, prompt=[text_block("one")])
            assert first.stop_reason == "end_turn"
            await wait_for_mode(deepbox_bin, env, "paused")
            again = await conn.prompt(session_id=session.session_id, prompt=[text_block("two")])
            assert again.stop_reason == "end_turn"
            # Idle again: paused again (and deleted all the same at the end).
            await wait_for_mode(deepbox_bin, env, "paused")

    asyncio.run(run())
    assert "first" in command_output(editor, "t_first")
    # The same sandbox, resumed: its files kept, the command ran in it.
    out = command_output(editor, "t_again")
    assert "again" in out and "first" in out
    assert editor.mode_at_start["t_again"] == "running"
    assert sandboxes(deepbox_bin, env) == []


def test_long_idle_session_is_suspended_and_the_next_prompt_resumes_it(
        tmp_path: Path, deepbox_bin: str, env: dict[str, str], project: Path) -> None:
    model = write_replay(tmp_path / "suspend.jsonl", [
        {"tool_calls": [call("t_first", "execute",
                             command="echo kept > /workspace/kept.txt; "
                                     "sleep 600 >/dev/null 2>&1 & echo started")]},
        {"text": "first done"},
        {"tool_calls": [call("t_again", "execute",
                             command="cat /workspace/kept.txt; ps -eo args | grep -q '[s]leep 600' "
                                     "&& echo still-sleeping || echo no-sleep")]},
        {"text": "again done"},
    ])
    editor = ModeRecordingEditor(deepbox_bin, env)

    async def run() -> None:
        async with spawn_agent_process(lambda _agent: editor, deepbox_bin, "acp", "--model", model,
                                       "--mode", "auto", "--idle-pause", "1", "--idle-suspend", "2",
                                       env=env) as (conn, proc):
            await conn.initialize(protocol_version=1, client_capabilities=CAPS)
            session = await conn.new_session(cwd=str(project), mcp_servers=[])
            first = await conn.prompt(session_id=session.session_id, prompt=[text_block("one")])
            assert first.stop_reason == "end_turn"
            # Paused first, then suspended (even with a process left behind).
            await wait_for_mode(deepbox_bin, env, "suspended")
            again = await conn.prompt(session_id=session.session_id, prompt=[text_block("two")])
            assert again.stop_reason == "end_turn"

    asyncio.run(run())
    out = command_output(editor, "t_again")
    # The same sandbox, resumed: its files kept, its processes gone.
    assert "kept" in out and "no-sleep" in out, out
    assert editor.mode_at_start["t_again"] == "running"
    assert sandboxes(deepbox_bin, env) == []


def tool_text(editor: Editor, call_id: str) -> str:
    return "".join(c.content.text for u in editor.of_kind("tool_call_update") if u.tool_call_id == call_id
                   for c in (u.content or []) if c.type == "content")


def test_a_session_with_the_editors_mcp_server_is_suspended_and_starts_it_again(
        tmp_path: Path, deepbox_bin: str, env: dict[str, str], project: Path) -> None:
    (project / "shout_server.py").write_text(MCP_SERVER)
    model = write_replay(tmp_path / "mcp-suspend.jsonl", [
        {"tool_calls": [call("t_before", "mcp__shout__shout", text="before")]},
        {"text": "first done"},
        {"tool_calls": [call("t_after", "mcp__shout__shout", text="after")]},
        # The server's program goes: it cannot start after the next suspend.
        {"tool_calls": [call("t_mv", "execute", command="mv /workspace/shout_server.py /tmp/")]},
        {"text": "second done"},
        {"text": "third done"},  # shout is no longer offered: the replay could not call it
    ])
    editor = Editor()
    log = (tmp_path / "acp-stderr.log").open("wb")

    async def run() -> None:
        from acp.schema import McpServerStdio
        async with spawn_agent_process(lambda _agent: editor, deepbox_bin, "acp", "--model", model,
                                       "--mode", "auto", "--idle-pause", "1", "--idle-suspend", "2",
                                       env=env, transport_kwargs={"stderr": log.fileno()}) as (conn, proc):
            await conn.initialize(protocol_version=1, client_capabilities=CAPS)
            server = McpServerStdio(name="shout", command="python3",
                                    args=["/workspace/shout_server.py"], env=[])
            session = await conn.new_session(cwd=str(project), mcp_servers=[server])
            for text in ("one", "two", "three"):
                resp = await conn.prompt(session_id=session.session_id, prompt=[text_block(text)])
                assert resp.stop_reason == "end_turn"
                if text != "three":
                    await wait_for_mode(deepbox_bin, env, "suspended")

    asyncio.run(run())
    before, after = tool_text(editor, "t_before"), tool_text(editor, "t_after")
    assert "BEFORE from /workspace" in before, before
    # The suspend ended the server's process: started again, it answered.
    assert "AFTER from /workspace" in after, after
    log.close()
    stderr = (tmp_path / "acp-stderr.log").read_text()
    assert "MCP server (after the resume) shout: 1 tool (stdio in the sandbox" in stderr, stderr
    # A server that does not start again is said on stderr; the prompt still ran
    # (its tools are withdrawn: agent_mcp_test checks a call's error naming it).
    assert ("MCP server 'shout' (the client's mcpServers) did not start again after the sandbox "
            "was suspended") in stderr, stderr
    assert sandboxes(deepbox_bin, env) == []


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_editors_http_mcp_server_is_called_from_the_host(
        tmp_path: Path, deepbox_bin: str, env: dict[str, str], project: Path) -> None:
    """A real Streamable HTTP MCP server on loopback (`deepbox mcp --listen`,
    with a bearer token): its tools reach the agent, asked like commands,
    and the token is sent from the host, never put into the sandbox."""
    import socket
    token = "acp-test-token-0123456789"
    port = free_port()
    mcp_state = tempfile.mkdtemp(prefix="dbacpm-", dir="/tmp")
    server_env = dict(env, DEEPBOX_STATE_DIR=mcp_state, DEEPBOX_MCP_TOKEN=token)
    log = tempfile.TemporaryFile()
    server = subprocess.Popen([deepbox_bin, "mcp", "--listen", f"127.0.0.1:{port}", "--ttl", "900"],
                              env=server_env, stdout=log, stderr=log)
    try:
        for _ in range(600):
            assert server.poll() is None, "deepbox mcp exited"
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        model = write_replay(tmp_path / "mcp-http.jsonl", [
            {"tool_calls": [call("t_list", "mcp__box__sandbox_list")]},
            {"tool_calls": [call("t_env", "execute",
                                 command="grep -rsl acp-test-token /proc/*/environ /workspace | wc -l")]},
            {"text": "done"},
        ])
        editor = Editor()
        acp_log = (tmp_path / "acp-stderr.log").open("wb")

        async def run() -> Any:
            from acp.schema import HttpHeader, HttpMcpServer
            async with spawn_agent_process(lambda _agent: editor, deepbox_bin, "acp", "--model", model,
                                           env=env, transport_kwargs={"stderr": acp_log.fileno()}) as (conn, proc):
                init = await conn.initialize(protocol_version=1, client_capabilities=CAPS)
                url = f"http://127.0.0.1:{port}/mcp"
                servers = [
                    HttpMcpServer(type="http", name="box", url=url,
                                  headers=[HttpHeader(name="Authorization", value=f"Bearer {token}")]),
                    # A wrong token: refused by the server, left out, the session still opens.
                    HttpMcpServer(type="http", name="nope", url=url,
                                  headers=[HttpHeader(name="Authorization", value="Bearer wrong")]),
                ]
                session = await conn.new_session(cwd=str(project), mcp_servers=servers)
                stderr = (tmp_path / "acp-stderr.log").read_text()
                assert "MCP server box: " in stderr and "(http, protocol " in stderr, stderr
                assert "MCP server 'nope' (the client's mcpServers) did not start" in stderr, stderr
                resp = await conn.prompt(session_id=session.session_id, prompt=[text_block("go")])
                assert resp.stop_reason == "end_turn"
                return init

        init = asyncio.run(run())
    finally:
        server.send_signal(15)
        server.wait(60)
        shutil.rmtree(mcp_state, ignore_errors=True)
    assert init.agent_capabilities.mcp_capabilities.http is True
    assert init.agent_capabilities.mcp_capabilities.sse is False
    # Asked like a command, and said to run from this machine.
    asked = [p for p in editor.permissions if p.tool_call_id == "t_list"]
    assert len(asked) == 1
    shown = "".join(c.content.text for c in asked[0].content if c.type == "content")
    assert "an HTTP server, called from this machine" in shown, shown
    done = [u for u in editor.of_kind("tool_call_update") if u.tool_call_id == "t_list" and u.status]
    assert done[-1].status == "completed", tool_text(editor, "t_list")
    counted = {line for line in tool_text(editor, "t_env").splitlines() if line.strip("` ")}
    assert counted == {"0"}, tool_text(editor, "t_env")  # no process nor file holds the token
    assert sandboxes(deepbox_bin, env) == []


def test_session_resume_fork_and_delete(tmp_path: Path, deepbox_bin: str, env: dict[str, str],
                                        project: Path) -> None:
    """session/fork copies a thread under a new id (its history comes back on
    session/load); session/resume reopens one without replaying it;
    session/delete closes a session and removes its saved thread."""
    model = write_replay(tmp_path / "fork.jsonl", [{"text": "one"}, {"text": "two"}])
    editor = Editor()

    async def first() -> tuple[str, str, Any]:
        async with spawn_agent_process(lambda _agent: editor, deepbox_bin, "acp", "--model", model,
                                       env=env) as (conn, proc):
            init = await conn.initialize(protocol_version=1, client_capabilities=CAPS)
            caps = init.agent_capabilities.session_capabilities
            assert caps.resume is not None and caps.fork is not None and caps.delete is not None
            a = await conn.new_session(cwd=str(project), mcp_servers=[])
            await conn.prompt(session_id=a.session_id, prompt=[text_block("the first prompt")])
            forked = await conn.fork_session(session_id=a.session_id, cwd=str(project),
                                             mcp_servers=[])
            assert forked.session_id != a.session_id
            assert len(sandboxes(deepbox_bin, env)) == 2  # each session its own sandbox
            listed = {s.session_id for s in (await conn.list_sessions()).sessions}
            return a.session_id, forked.session_id, listed

    a_id, fork_id, listed = asyncio.run(first())
    assert {a_id, fork_id} <= listed
    assert sandboxes(deepbox_bin, env) == []

    # A fork whose session cannot open (its project over the cap) leaves no
    # thread behind.
    big = tmp_path / "big"
    big.mkdir()
    for i in range(3):
        (big / f"f{i}.txt").write_text("x\n")

    async def refused() -> set[str]:
        async with spawn_agent_process(lambda _agent: Editor(), deepbox_bin, "acp", "--model",
                                       model, "--max-project-files", "2", env=env) as (conn, proc):
            await conn.initialize(protocol_version=1, client_capabilities=CAPS)
            with pytest.raises(Exception) as over:
                await conn.fork_session(session_id=a_id, cwd=str(big), mcp_servers=[])
            assert "more than 2 files" in str(over.value)
            return {s.session_id for s in (await conn.list_sessions()).sessions}

    assert asyncio.run(refused()) == listed
    assert sandboxes(deepbox_bin, env) == []

    editor2 = Editor()

    async def second() -> None:
        async with spawn_agent_process(lambda _agent: editor2, deepbox_bin, "acp", "--model", model,
                                       env=env) as (conn, proc):
            await conn.initialize(protocol_version=1, client_capabilities=CAPS)
            await conn.load_session(cwd=str(project), session_id=fork_id, mcp_servers=[])
            replayed = "".join(u.content.text for u in editor2.of_kind("user_message_chunk"))
            assert "the first prompt" in replayed  # the fork holds the original's history
            before = len(editor2.updates)
            resumed = await conn.resume_session(session_id=a_id, cwd=str(project), mcp_servers=[])
            assert resumed.modes.current_mode_id == "approve-all"
            assert len(editor2.updates) == before  # resume replays nothing
            resp = await conn.prompt(session_id=a_id, prompt=[text_block("go on")])
            assert resp.stop_reason == "end_turn"
            answer = "".join(u.content.text for u in editor2.updates[before:]
                             if getattr(u, "session_update", None) == "agent_message_chunk")
            assert answer == "one"  # this process's model, from its first turn
            # Deleting the open session: closed (its sandbox deleted), thread gone.
            await conn._conn.send_request("session/delete", {"sessionId": a_id})
            listed = {s.session_id for s in (await conn.list_sessions()).sessions}
            assert a_id not in listed and fork_id in listed
            assert len(sandboxes(deepbox_bin, env)) == 1  # the fork's
            with pytest.raises(Exception) as gone:
                await conn.resume_session(session_id=a_id, cwd=str(project), mcp_servers=[])
            assert "no saved deepbox thread" in str(gone.value)
            with pytest.raises(Exception) as unknown:
                await conn._conn.send_request("session/delete", {"sessionId": "th-no-such"})
            assert "no saved deepbox thread" in str(unknown.value)

    asyncio.run(second())
    assert sandboxes(deepbox_bin, env) == []


def test_session_list_and_close(tmp_path: Path, deepbox_bin: str, env: dict[str, str],
                                project: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "x.txt").write_text("x\n")
    model = write_replay(tmp_path / "list.jsonl", [
        {"text": "ok"},
        {"tool_calls": [call("t_sleep", "execute", command="sleep 30")]},
        {"text": "never"},
    ])
    editor = Editor()

    async def run() -> tuple[Any, Any, Any, float]:
        async with spawn_agent_process(lambda _agent: editor, deepbox_bin, "acp", "--model", model,
                                       "--mode", "auto", env=env) as (conn, proc):
            init = await conn.initialize(protocol_version=1, client_capabilities=CAPS)
            caps = init.agent_capabilities.session_capabilities
            assert caps.list is not None and caps.close is not None
            a = await conn.new_session(cwd=str(project), mcp_servers=[])
            b = await conn.new_session(cwd=str(other) + "/", mcp_servers=[])
            await conn.prompt(session_id=a.session_id, prompt=[text_block("Fix the bug\nin calc.py")])
            everything = await conn.list_sessions()
            mine = await conn.list_sessions(cwd=str(project))
            # Closing a session with a prompt running: cancelled, sandbox deleted.
            running = asyncio.ensure_future(
                conn.prompt(session_id=a.session_id, prompt=[text_block("sleep")]))
            await editor.running("t_sleep")
            start = time.monotonic()
            await conn.close_session(session_id=a.session_id)
            closed_in = time.monotonic() - start
            stopped = await running
            assert len(sandboxes(deepbox_bin, env)) == 1  # b's
            with pytest.raises(Exception, match="no such session"):
                await conn.prompt(session_id=a.session_id, prompt=[text_block("again")])
            with pytest.raises(Exception, match="no such session"):
                await conn.close_session(session_id=a.session_id)
            # Its thread is kept: loaded again, in a new sandbox.
            await conn.load_session(cwd=str(project), session_id=a.session_id, mcp_servers=[])
            assert len(sandboxes(deepbox_bin, env)) == 2
            await conn.close_session(session_id=b.session_id)
            assert len(sandboxes(deepbox_bin, env)) == 1
            return (a, b, (everything, mine, stopped), closed_in)

    a, b, (everything, mine, stopped), closed_in = asyncio.run(run())
    ids = [i.session_id for i in everything.sessions]
    assert a.session_id in ids and b.session_id in ids
    by_id = {i.session_id: i for i in everything.sessions}
    assert by_id[b.session_id].cwd == str(other)  # normalized
    assert by_id[a.session_id].title == "Fix the bug"
    assert by_id[a.session_id].updated_at
    assert [i.session_id for i in mine.sessions] == [a.session_id]
    assert mine.next_cursor is None
    assert stopped.stop_reason == "cancelled"
    assert closed_in < 20  # well before the 30 s sleep would have ended
    assert sandboxes(deepbox_bin, env) == []


def test_a_session_with_a_prompt_running_is_not_paused(
        tmp_path: Path, deepbox_bin: str, env: dict[str, str], project: Path) -> None:
    model = write_replay(tmp_path / "busy.jsonl", [
        {"tool_calls": [call("t_sleep", "execute", command="sleep 3; echo slept")]},
        {"text": "done"},
    ])
    editor = Editor()
    modes: list[str] = []

    async def run() -> Any:
        async with spawn_agent_process(lambda _agent: editor, deepbox_bin, "acp", "--model", model,
                                       "--mode", "auto", "--idle-pause", "1", env=env) as (conn, proc):
            await conn.initialize(protocol_version=1, client_capabilities=CAPS)
            session = await conn.new_session(cwd=str(project), mcp_servers=[])
            prompt = asyncio.create_task(
                conn.prompt(session_id=session.session_id, prompt=[text_block("wait")]))
            await editor.running("t_sleep")
            # While the command runs (well past --idle-pause): never paused.
            while not prompt.done():
                modes.append(await asyncio.to_thread(sandbox_mode, deepbox_bin, env))
                await asyncio.sleep(0.2)
            return await prompt

    resp = asyncio.run(run())
    assert resp.stop_reason == "end_turn"
    assert "slept" in command_output(editor, "t_sleep")
    finals = [u.status for u in editor.of_kind("tool_call_update") if u.tool_call_id == "t_sleep" and u.status]
    assert finals[-1] == "completed"
    assert modes and set(modes) == {"running"}, modes
    assert sandboxes(deepbox_bin, env) == []


def test_a_sandbox_that_cannot_be_resumed_fails_the_prompt_clearly(
        tmp_path: Path, deepbox_bin: str, env: dict[str, str], project: Path) -> None:
    model = write_replay(tmp_path / "gone.jsonl", [{"text": "first"}, {"text": "never"}])
    editor = Editor()

    async def run() -> tuple[str, str]:
        async with spawn_agent_process(lambda _agent: editor, deepbox_bin, "acp", "--model", model,
                                       "--idle-pause", "1", env=env) as (conn, proc):
            await conn.initialize(protocol_version=1, client_capabilities=CAPS)
            session = await conn.new_session(cwd=str(project), mcp_servers=[])
            await conn.prompt(session_id=session.session_id, prompt=[text_block("one")])
            await wait_for_mode(deepbox_bin, env, "paused")
            (sb,) = sandboxes(deepbox_bin, env)
            subprocess.run([deepbox_bin, "sandbox", "rm", sb["id"]], env=env, check=True,
                           capture_output=True)
            with pytest.raises(Exception) as failed:
                await conn.prompt(session_id=session.session_id, prompt=[text_block("two")])
            return sb["id"], str(failed.value)

    sandbox_id, error = asyncio.run(run())
    assert f"cannot resume sandbox {sandbox_id}" in error, error
    assert sandboxes(deepbox_bin, env) == []


class TerminalEditor(Editor):
    """An editor that offers terminals and, as editors do, runs the command
    terminal/create names on the host (here a subprocess), showing its output."""

    def __init__(self) -> None:
        super().__init__()
        self.created: list[dict[str, Any]] = []
        self.procs: dict[str, Any] = {}
        self.output: dict[str, bytearray] = {}
        self.pumps: dict[str, Any] = {}
        self.exits: dict[str, int | None] = {}
        self.released: list[str] = []

    async def create_terminal(self, session_id: str, command: str, args: list[str] | None = None,
                              env: Any = None, cwd: str | None = None,
                              output_byte_limit: int | None = None, **kw: Any):
        terminal_id = f"term-{len(self.created)}"
        self.created.append({"command": command, "args": list(args or []), "cwd": cwd,
                             "output_byte_limit": output_byte_limit})
        proc = await asyncio.create_subprocess_exec(
            command, *(args or []), cwd=cwd, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.procs[terminal_id] = proc
        self.output[terminal_id] = bytearray()

        async def pump() -> None:
            assert proc.stdout
            while chunk := await proc.stdout.read(65536):
                self.output[terminal_id] += chunk
            await proc.wait()

        self.pumps[terminal_id] = asyncio.create_task(pump())
        return CreateTerminalResponse(terminal_id=terminal_id)

    async def wait_for_terminal_exit(self, session_id: str, terminal_id: str, **kw: Any):
        await self.pumps[terminal_id]
        code = self.procs[terminal_id].returncode
        self.exits[terminal_id] = code
        return WaitForTerminalExitResponse(exit_code=code if code >= 0 else None)

    async def terminal_output(self, session_id: str, terminal_id: str, **kw: Any):
        code = self.procs[terminal_id].returncode
        return TerminalOutputResponse(
            output=self.output[terminal_id].decode(errors="replace"), truncated=False,
            exit_status=TerminalExitStatus(exit_code=code) if code is not None else None)

    async def release_terminal(self, session_id: str, terminal_id: str, **kw: Any):
        proc = self.procs[terminal_id]
        if proc.returncode is None:
            proc.kill()
        await self.pumps[terminal_id]
        self.released.append(terminal_id)
        return ReleaseTerminalResponse()


TERMINAL_CAPS = ClientCapabilities(
    fs=FileSystemCapabilities(read_text_file=True, write_text_file=True), terminal=True)


def test_commands_show_in_the_editors_terminal_but_run_in_the_sandbox(
        tmp_path: Path, deepbox_bin: str, env: dict[str, str], project: Path) -> None:
    """With `terminal` offered, the editor's terminal runs `deepbox acp-view`,
    which shows the output of the command running in the sandbox: the
    agent's command itself never reaches the editor, so never the host."""
    marker = tmp_path / "ran-on-the-host"
    model = write_replay(tmp_path / "term.jsonl", [
        {"tool_calls": [call("t_term", "execute",
                             command=f"echo SANDBOX-SAYS $(pwd); mkdir -p {tmp_path}; "
                                     f"touch {marker} && ls {marker}; ls /workspace; exit 3")]},
        {"tool_calls": [call("t_ok", "execute", command="echo second")]},
        {"text": "done"},
    ])
    editor = TerminalEditor()

    async def run() -> Any:
        async with spawn_agent_process(lambda _agent: editor, deepbox_bin, "acp", "--model", model,
                                       "--mode", "auto", env=env) as (conn, proc):
            await conn.initialize(protocol_version=1, client_capabilities=TERMINAL_CAPS)
            session = await conn.new_session(cwd=str(project), mcp_servers=[])
            return await conn.prompt(session_id=session.session_id, prompt=[text_block("go")])

    resp = asyncio.run(run())
    assert resp.stop_reason == "end_turn"
    assert not marker.exists(), "the agent's command ran on the host"

    # What the editor was asked to run: deepbox's viewer of a spool, nothing
    # of the agent's command.
    assert len(editor.created) == 2
    for created in editor.created:
        assert os.path.realpath(created["command"]) == os.path.realpath(deepbox_bin)
        assert created["args"][0] == "acp-view" and len(created["args"]) == 2
        assert "SANDBOX-SAYS" not in json.dumps(created) and "echo" not in json.dumps(created)
        assert created["cwd"] == str(project)
        assert not Path(created["args"][1]).exists()  # the spool went with the call

    # The editor's terminal showed the sandbox's output and status.
    first = editor.output["term-0"].decode()
    assert "SANDBOX-SAYS /workspace" in first
    assert str(marker) in first  # made in the sandbox's /tmp, not the host's
    assert "calc.py" in first and "secret.env" not in first
    assert editor.exits == {"term-0": 3, "term-1": 0}
    assert editor.output["term-1"].decode() == "second\n"
    assert sorted(editor.released) == ["term-0", "term-1"]

    # The tool calls embed the terminals (a command's own exit status is the
    # model's to judge: the call completed, as without terminals).
    for call_id, terminal_id, status in (("t_term", "term-0", "completed"),
                                         ("t_ok", "term-1", "completed")):
        updates = [u for u in editor.of_kind("tool_call") + editor.of_kind("tool_call_update")
                   if u.tool_call_id == call_id]
        running = next(u for u in updates if u.status == "in_progress")
        assert [(c.type, c.terminal_id) for c in running.content] == [("terminal", terminal_id)]
        final = [u for u in updates if u.status in ("completed", "failed")]
        assert [u.status for u in final] == [status]
        assert [(c.type, c.terminal_id) for c in final[0].content] == [("terminal", terminal_id)]
        # The output is in the terminal, not streamed as text as well (the
        # announcement before it ran quotes the command, not its output).
        shown = "".join(c.content.text for u in updates for c in (u.content or [])
                        if c.type == "content")
        assert "SANDBOX-SAYS /workspace" not in shown
        assert "exit code" in final[0].raw_output["output"]  # what the model was told
    assert sandboxes(deepbox_bin, env) == []


def test_cancel_with_a_terminal_releases_it(tmp_path: Path, deepbox_bin: str, env: dict[str, str],
                                            project: Path) -> None:
    model = write_replay(tmp_path / "term-sleep.jsonl", [
        {"tool_calls": [call("t_sleep", "execute", command="echo sleeping; sleep 30")]},
        {"text": "never"},
    ])
    editor = TerminalEditor()

    async def run() -> tuple[Any, float]:
        async with spawn_agent_process(lambda _agent: editor, deepbox_bin, "acp", "--model", model,
                                       "--mode", "auto", env=env) as (conn, proc):
            await conn.initialize(protocol_version=1, client_capabilities=TERMINAL_CAPS)
            session = await conn.new_session(cwd=str(project), mcp_servers=[])
            prompt = asyncio.create_task(
                conn.prompt(session_id=session.session_id, prompt=[text_block("wait")]))
            await editor.running("t_sleep")
            for _ in range(300):  # until the terminal shows the command running
                if b"sleeping" in editor.output.get("term-0", b""):
                    break
                await asyncio.sleep(0.05)
            t0 = time.monotonic()
            await conn.cancel(session_id=session.session_id)
            resp = await asyncio.wait_for(prompt, timeout=10)
            return resp, time.monotonic() - t0

    resp, took = asyncio.run(run())
    assert resp.stop_reason == "cancelled"
    assert took < 5, f"cancel took {took:.1f}s"
    assert editor.output["term-0"].decode().startswith("sleeping\n")
    assert editor.released == ["term-0"]
    assert editor.procs["term-0"].returncode is not None  # the viewer is gone too
    assert sandboxes(deepbox_bin, env) == []


def test_acp_view_refuses_what_is_no_spool(tmp_path: Path, deepbox_bin: str) -> None:
    """Run by hand, the viewer shows a spool of `deepbox acp` or nothing."""
    other = tmp_path / "notes.out"
    other.write_text("not a spool\n")
    r = subprocess.run([deepbox_bin, "acp-view", str(other)], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 2
    assert "not a spool" in r.stderr and "not a spool" not in r.stdout


# A 1x1 red PNG.
RED_PIXEL = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==")


class FakeAnthropic:
    """The Anthropic Messages API on 127.0.0.1 (what cannot run here),
    speaking its wire protocol (SSE when asked to stream); it records every
    request body and answers each with one line of text."""

    def __init__(self) -> None:
        import http.server
        import threading

        self.requests: list[dict[str, Any]] = []
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.requests.append(body)
                text = "I see one red pixel."
                usage = {"input_tokens": 10, "output_tokens": 5}
                if not body.get("stream"):
                    out = json.dumps({"id": "msg_1", "type": "message", "role": "assistant",
                                      "model": body["model"], "stop_reason": "end_turn",
                                      "content": [{"type": "text", "text": text}],
                                      "usage": usage}).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(out)))
                    self.end_headers()
                    self.wfile.write(out)
                    return
                events = [
                    ("message_start", {"type": "message_start", "message": {
                        "id": "msg_1", "type": "message", "role": "assistant", "model": body["model"],
                        "content": [], "stop_reason": None, "usage": usage}}),
                    ("content_block_start", {"type": "content_block_start", "index": 0,
                                             "content_block": {"type": "text", "text": ""}}),
                    ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                             "delta": {"type": "text_delta", "text": text}}),
                    ("content_block_stop", {"type": "content_block_stop", "index": 0}),
                    ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"},
                                       "usage": {"output_tokens": 5}}),
                    ("message_stop", {"type": "message_stop"}),
                ]
                out = "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_an_image_in_the_prompt_reaches_the_model(tmp_path: Path, deepbox_bin: str,
                                                  env: dict[str, str], project: Path) -> None:
    from acp import image_block

    fake = FakeAnthropic()
    env = dict(env, ANTHROPIC_API_KEY="sk-ant-test", ANTHROPIC_BASE_URL=fake.url)
    editor = Editor()

    async def run() -> tuple[Any, Any]:
        async with spawn_agent_process(lambda _agent: editor, deepbox_bin, "acp", "--model",
                                       "anthropic:claude-sonnet-4-6", env=env) as (conn, proc):
            init = await conn.initialize(protocol_version=1, client_capabilities=CAPS)
            assert init.agent_capabilities.prompt_capabilities.image is True
            session = await conn.new_session(cwd=str(project), mcp_servers=[])
            resp = await conn.prompt(session_id=session.session_id,
                                     prompt=[text_block("what is this?"),
                                             image_block(RED_PIXEL, "image/png")])
            with pytest.raises(Exception) as refused:
                await conn.prompt(session_id=session.session_id,
                                  prompt=[image_block(RED_PIXEL, "image/tiff")])
            return session.session_id, resp, refused.value

    loader = Editor()

    async def load(session_id: str) -> None:
        async with spawn_agent_process(lambda _agent: loader, deepbox_bin, "acp", "--model",
                                       "anthropic:claude-sonnet-4-6", env=env) as (conn, proc):
            await conn.initialize(protocol_version=1, client_capabilities=CAPS)
            await conn.load_session(cwd=str(project), session_id=session_id, mcp_servers=[])

    try:
        session_id, resp, refused = asyncio.run(run())
        asyncio.run(load(session_id))
    finally:
        fake.close()
    # The thread kept the image: session/load shows it again.
    replayed = [u.content for u in loader.of_kind("user_message_chunk") if u.content.type == "image"]
    assert [(c.mime_type, c.data) for c in replayed] == [("image/png", RED_PIXEL)]
    assert resp.stop_reason == "end_turn"
    assert "not supported" in str(refused)
    assert len(fake.requests) == 1  # the refused prompt never reached the model
    user = fake.requests[0]["messages"][-1]
    assert user["role"] == "user"
    images = [b["source"] for b in user["content"] if b["type"] == "image"]
    assert images == [{"type": "base64", "media_type": "image/png", "data": RED_PIXEL}]
    assert any(b["type"] == "text" and "what is this?" in b["text"] for b in user["content"])
    text = "".join(u.content.text for u in editor.of_kind("agent_message_chunk"))
    assert "I see one red pixel." in text
    assert sandboxes(deepbox_bin, env) == []
