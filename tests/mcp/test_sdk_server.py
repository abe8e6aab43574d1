"""The official MCP Python SDK (PyPI `mcp`, pinned in requirements-sdk.txt) as a
real client of `deepbox mcp`, over stdio and Streamable HTTP, in both protocol
generations: 2026-07-28 (`mode="auto"` probes server/discover and stays
modern) and the 2025-11-25 initialize handshake (`mode="legacy"`)."""

import base64
import json
import os
import signal
import subprocess
import sys
import urllib.request

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from conftest import DEEPBOX, HttpServer, run_deepbox, sandbox_ids, wait_until

TOOLS = {"sandbox_create", "sandbox_list", "sandbox_delete", "sandbox_pause", "sandbox_suspend",
         "sandbox_resume", "sandbox_snapshot", "execute", "ls", "read_file",
         "write_file", "edit_file", "glob", "grep", "upload_file", "download_file"}


def stdio_params(state):
    return StdioServerParameters(command=DEEPBOX, args=["mcp", "--ttl", "900"],
                                 env=dict(os.environ, DEEPBOX_STATE_DIR=state))


def http_transport(server):
    headers = {"Authorization": f"Bearer {server.token}"}
    return streamable_http_client(server.url,
                                  http_client=httpx2.AsyncClient(headers=headers, timeout=120))


def text(result):
    return result.content[0].text


def sandbox_of(result):
    return result.meta["dev.deepbox/sandbox_id"]


async def full_flow(client, expect_version, stateless=False):
    assert client.protocol_version == expect_version
    assert client.server_info.name == "deepbox"
    assert client.server_capabilities.tools is not None
    tools = await client.list_tools()
    assert {t.name for t in tools.tools} == TOOLS
    schemas = {t.name: t.input_schema for t in tools.tools}
    assert schemas["read_file"]["additionalProperties"] is False
    assert "sandbox_id" in schemas["execute"]["properties"]

    # An explicit sandbox with labels, found again by selector.
    created = await client.call_tool("sandbox_create",
                                     {"labels": {"suite": "sdk"}, "ttl_seconds": 600})
    assert not created.is_error, text(created)
    sid = created.structured_content["sandbox_id"]
    assert created.structured_content["labels"]["suite"] == "sdk"
    listed = await client.call_tool("sandbox_list", {"selector": "suite=sdk"})
    assert [s["sandbox_id"] for s in listed.structured_content["sandboxes"]] == [sid]

    # execute: output streamed as progress, the exit status in structuredContent.
    progress = []

    async def on_progress(value, total, message):
        progress.append((value, message))

    ran = await client.call_tool(
        "execute", {"command": "echo hello; echo oops >&2; exit 3", "sandbox_id": sid},
        progress_callback=on_progress)
    assert not ran.is_error
    assert text(ran) == "hello\noops\n\n[Command failed with exit code 3]"
    assert ran.structured_content == {"sandbox_id": sid, "exit_code": 3, "timed_out": False,
                                      "output_bytes": 11}
    assert "".join(m for _, m in progress) == "hello\noops\n"
    assert [v for v, _ in progress] == sorted(v for v, _ in progress)

    # The file tools, with deepagents' output strings. glob and grep get a path
    # below /workspace: its lost+found (the workspace disk's) is unreadable,
    # which they report, as the agent's own tools do.
    w = await client.call_tool("write_file", {"file_path": "/workspace/src/fib.py",
                                              "content": "print('fib')\nx = 1\n",
                                              "sandbox_id": sid})
    assert text(w) == "Updated file /workspace/src/fib.py"
    r = await client.call_tool("read_file", {"file_path": "src/fib.py", "sandbox_id": sid})
    assert text(r) == "@@ lines 1-2 of 2 @@\nprint('fib')\nx = 1"
    e = await client.call_tool("edit_file", {"file_path": "/workspace/src/fib.py",
                                             "old_string": "x = 1", "new_string": "x = 2",
                                             "sandbox_id": sid})
    assert text(e) == "Successfully replaced 1 instance(s) of the string in '/workspace/src/fib.py'"
    g = await client.call_tool("glob", {"pattern": "**/*.py", "path": "/workspace/src",
                                        "sandbox_id": sid})
    assert text(g) == "['/workspace/src/fib.py']"
    gr = await client.call_tool("grep", {"pattern": "x = 2", "path": "/workspace/src",
                                         "sandbox_id": sid, "output_mode": "content"})
    assert "/workspace/src/fib.py" in text(gr) and "x = 2" in text(gr)
    ls = await client.call_tool("ls", {"path": "/workspace", "sandbox_id": sid})
    assert "/workspace/src" in text(ls)
    missing = await client.call_tool("read_file", {"file_path": "nope.txt", "sandbox_id": sid})
    assert missing.is_error
    assert text(missing) == "Error: File '/workspace/nope.txt': file_not_found"

    # Binary files both ways.
    blob = bytes(range(256)) * 8 + b"\x00\xff"
    up = await client.call_tool("upload_file", {"file_path": "data/blob.bin",
                                                "content_base64": base64.b64encode(blob).decode(),
                                                "sandbox_id": sid})
    assert up.structured_content == {"path": "/workspace/data/blob.bin", "size": len(blob)}
    down = await client.call_tool("download_file", {"file_path": "data/blob.bin",
                                                    "sandbox_id": sid})
    assert base64.b64decode(down.content[1].resource.blob) == blob
    assert down.structured_content["size"] == len(blob)
    check = await client.call_tool("execute", {"command": "sha256sum data/blob.bin",
                                               "sandbox_id": sid})
    import hashlib
    assert hashlib.sha256(blob).hexdigest() in text(check)

    # Without sandbox_id: the client's default sandbox (stateless clients have none).
    d = await client.call_tool("execute", {"command": "pwd"})
    if stateless:
        assert d.is_error
        assert "sandbox_id is required" in text(d) and "sandbox_create" in text(d)
        default_id = None
    else:
        default_id = sandbox_of(d)
        assert default_id != sid
        assert text(d) == "/workspace\n\n[Command succeeded with exit code 0]"
    listed = await client.call_tool("sandbox_list", {})
    assert listed.structured_content["default_sandbox_id"] == default_id

    # Suspended: no process left, the files kept; the next call wakes it.
    susp = await client.call_tool("sandbox_suspend", {"sandbox_id": sid})
    assert text(susp) == f"Suspended sandbox {sid}.", text(susp)
    listed = await client.call_tool("sandbox_list", {})
    assert {"sandbox_id": sid, "state": "suspended"}.items() <= next(
        x for x in listed.structured_content["sandboxes"] if x["sandbox_id"] == sid).items()
    woke = await client.call_tool("execute", {"command": "sha256sum data/blob.bin",
                                              "sandbox_id": sid})
    assert hashlib.sha256(blob).hexdigest() in text(woke), text(woke)
    paused = await client.call_tool("sandbox_pause", {"sandbox_id": sid})
    if paused.is_error:  # a host without a cgroup freezer (e.g. not root) says so
        assert "no cgroup freezer" in text(paused), text(paused)
    else:
        assert text(paused) == f"Paused sandbox {sid}."
        again = await client.call_tool("read_file", {"file_path": "src/fib.py", "sandbox_id": sid})
        assert "x = 2" in text(again), text(again)
    resumed = await client.call_tool("sandbox_resume", {"sandbox_id": sid})
    assert text(resumed) == f"Resumed sandbox {sid}."

    # A snapshot, a sandbox from it, and a fork: the same files, apart.
    snap = await client.call_tool("sandbox_snapshot", {"sandbox_id": sid})
    assert not snap.is_error, text(snap)
    name = snap.structured_content["name"]
    restored = await client.call_tool("sandbox_create", {"from_snapshot": name})
    assert not restored.is_error, text(restored)
    rid = restored.structured_content["sandbox_id"]
    forked = await client.call_tool("sandbox_create", {"fork_of": sid})
    assert not forked.is_error, text(forked)
    fid = forked.structured_content["sandbox_id"]
    for other in (rid, fid):
        r = await client.call_tool("execute", {"command": "sha256sum data/blob.bin", "sandbox_id": other})
        assert hashlib.sha256(blob).hexdigest() in text(r), text(r)
        await client.call_tool("sandbox_delete", {"sandbox_id": other})
    unknown = await client.call_tool("sandbox_create", {"from_snapshot": "not-ours"})
    assert unknown.is_error and "no snapshot 'not-ours' of this client" in text(unknown)

    deleted = await client.call_tool("sandbox_delete", {"sandbox_id": sid})
    assert text(deleted) == f"Deleted sandbox {sid}."
    gone = await client.call_tool("ls", {"sandbox_id": sid})
    assert gone.is_error
    return default_id


@pytest.mark.parametrize("mode,version", [("auto", "2026-07-28"), ("legacy", "2025-11-25")])
def test_stdio(state, mode, version):
    async def main():
        async with Client(stdio_params(state), mode=mode) as client:
            return await full_flow(client, version)

    default_id = anyio.run(main)
    # The client went away: its default sandbox is deleted.
    wait_until(lambda: default_id not in sandbox_ids(state), what="default sandbox deleted")


@pytest.mark.parametrize("mode,version", [("auto", "2026-07-28"), ("legacy", "2025-11-25")])
def test_http(state, http_server, mode, version):
    async def main():
        async with Client(http_transport(http_server), mode=mode) as client:
            return await full_flow(client, version, stateless=mode == "auto")

    default_id = anyio.run(main)
    if mode == "legacy":
        # The SDK ends its session with DELETE: the session's default sandbox goes.
        wait_until(lambda: default_id not in sandbox_ids(state), what="default sandbox deleted")
    assert http_server.stop() == 0
    assert sandbox_ids(state) == []


def test_unknown_tool_and_wrong_argument_types(state):
    async def main():
        async with Client(stdio_params(state)) as client:
            with pytest.raises(MCPError) as err:
                await client.call_tool("no_such_tool", {})
            assert err.value.code == -32602
            assert "Unknown tool: no_such_tool" in err.value.message
            bad = await client.call_tool("read_file", {"file_path": "/workspace/a",
                                                       "offset": "5", "bogus": True})
            assert bad.is_error
            assert text(bad) == ("Invalid arguments for tool read_file:\n"
                                 " - 'offset' must be an integer, not a string\n"
                                 " - unknown argument 'bogus' (allowed: file_path, offset, "
                                 "limit, sandbox_id)\n"
                                 "Fix the arguments and call the tool again.")
            bad = await client.call_tool("execute", {"command": ["ls"]})
            assert bad.is_error and "'command' must be a string, not an array" in text(bad)
            bad = await client.call_tool("sandbox_create", {"ttl_seconds": -1})
            assert bad.is_error and "'ttl_seconds' must be at least 0" in text(bad)

    anyio.run(main)
    assert sandbox_ids(state) == []  # nothing ran, nothing was created


def raw_stdio(state, lines):
    """Sends raw lines to `deepbox mcp` and returns the JSON lines it answered."""
    proc = subprocess.run([DEEPBOX, "mcp"], input="".join(l + "\n" for l in lines),
                          env=dict(os.environ, DEEPBOX_STATE_DIR=state), capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return [json.loads(l) for l in proc.stdout.splitlines()]


def test_malformed_jsonrpc_over_stdio(state):
    out = raw_stdio(state, [
        "{oops",
        '[{"jsonrpc":"2.0","id":1,"method":"tools/list"}]',
        '{"jsonrpc":"2.0","id":2}',
        '{"jsonrpc":"2.0","id":null,"method":"tools/list"}',
        '{"jsonrpc":"1.0","id":3,"method":"tools/list"}',
        '{"jsonrpc":"2.0","id":4,"method":"tools/list"}',   # no envelope, no handshake
        '{"jsonrpc":"2.0","id":5,"method":"no/such/method"}',
        '{"jsonrpc":"2.0","id":6,"method":"ping"}',
    ])
    codes = [(m.get("id"), m["error"]["code"]) if "error" in m else (m["id"], "ok") for m in out]
    assert codes == [(None, -32700), (None, -32600), (2, -32600), (None, -32600), (3, -32600),
                     (4, -32602), (5, -32601), (6, "ok")]


def test_malformed_jsonrpc_over_http(http_server):
    def post(body, headers=None, token=http_server.token):
        req = urllib.request.Request(http_server.url, data=body.encode(), method="POST")
        req.add_header("Content-Type", "application/json")
        req.add_header("Accept", "application/json, text/event-stream")
        if token:
            req.add_header("Authorization", f"Bearer {token}")
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    status, body = post("{oops")
    assert status == 400 and json.loads(body)["error"]["code"] == -32700
    status, _ = post('{"jsonrpc":"2.0","id":1,"method":"tools/list"}', token=None)
    assert status == 401
    status, _ = post('{"jsonrpc":"2.0","id":1,"method":"tools/list"}', token="wrong")
    assert status == 401
    status, body = post('{"jsonrpc":"2.0","id":1,"method":"tools/list"}',
                        headers={"Origin": "https://evil.example"})
    assert status == 403
    modern = ('{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{'
              '"io.modelcontextprotocol/protocolVersion":"2026-07-28",'
              '"io.modelcontextprotocol/clientCapabilities":{}}}}')
    status, body = post(modern, headers={"MCP-Protocol-Version": "2026-07-28",
                                         "Mcp-Method": "tools/call"})
    assert status == 400 and json.loads(body)["error"]["code"] == -32020
    status, body = post(modern, headers={"MCP-Protocol-Version": "2026-07-28",
                                         "Mcp-Method": "tools/list"})
    assert status == 200 and len(json.loads(body)["result"]["tools"]) == len(TOOLS)


# A client process that starts a long command and then waits to be killed.
HOLDER = r"""
import anyio, os, sys
from mcp import Client
from mcp.client.stdio import StdioServerParameters

async def main():
    params = StdioServerParameters(command=sys.argv[1], args=["mcp", "--ttl", "900"],
                                   env=dict(os.environ))
    async with Client(params) as client:
        first = await client.call_tool("execute", {"command": "true"})
        default_id = first.meta["dev.deepbox/sandbox_id"]
        created = await client.call_tool("sandbox_create", {})
        sid = created.structured_content["sandbox_id"]
        print(default_id, sid, flush=True)
        started = anyio.Event()

        async def on_progress(value, total, message):
            if "started" in (message or ""):
                started.set()

        async def run(target):
            await client.call_tool(
                "execute", {"command": "echo $$ > /workspace/pid; echo started; exec sleep 300",
                            **target}, progress_callback=on_progress)

        async with anyio.create_task_group() as tg:
            tg.start_soon(run, {"sandbox_id": sid})
            await started.wait()
            started = anyio.Event()
            tg.start_soon(run, {})
            await started.wait()
            print("running", flush=True)
            await anyio.sleep(3600)

anyio.run(main)
"""


def test_client_that_disconnects_mid_command(state, tmp_path):
    script = tmp_path / "holder.py"
    script.write_text(HOLDER)
    holder = subprocess.Popen([sys.executable, str(script), DEEPBOX],
                              env=dict(os.environ, DEEPBOX_STATE_DIR=state),
                              stdout=subprocess.PIPE, text=True)
    try:
        default_id, sid = holder.stdout.readline().split()
        assert holder.stdout.readline().strip() == "running"
        assert set(sandbox_ids(state)) == {default_id, sid}
        pid = run_deepbox(state, "sandbox", "exec", sid, "--", "cat", "/workspace/pid").stdout
        assert pid.strip().isdigit()
    finally:
        holder.send_signal(signal.SIGKILL)  # no goodbye: its pipes just close
        holder.wait()
    # The default sandbox is deleted; in the explicit one the command was killed.
    wait_until(lambda: sandbox_ids(state) == [sid], what="default sandbox deleted")

    def killed():
        r = run_deepbox(state, "sandbox", "exec", sid, "--", "sh", "-c",
                        "kill -0 $(cat /workspace/pid)", check=False)
        return r.returncode != 0

    wait_until(killed, what="the command killed")


def test_http_client_that_disconnects_mid_command(state, http_server):
    async def main():
        async with Client(http_transport(http_server)) as client:
            created = await client.call_tool("sandbox_create", {})
            sid = created.structured_content["sandbox_id"]
            started = anyio.Event()

            async def on_progress(value, total, message):
                if "started" in (message or ""):
                    started.set()

            async def run():
                await client.call_tool("execute", {
                    "command": "echo $$ > /workspace/pid; echo started; exec sleep 300",
                    "sandbox_id": sid}, progress_callback=on_progress)

            with anyio.move_on_after(120):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(run)
                    await started.wait()
                    tg.cancel_scope.cancel()  # the SDK closes the request's stream
            return sid

    sid = anyio.run(main)

    def killed():
        r = run_deepbox(state, "sandbox", "exec", sid, "--", "sh", "-c",
                        "kill -0 $(cat /workspace/pid)", check=False)
        return r.returncode != 0

    wait_until(killed, what="the command killed")


# --- walls between clients, and the server's limits (issue 21 M2/M3) -------------------------

def stdio_server(state, *args):
    return StdioServerParameters(command=DEEPBOX, args=["mcp", *args],
                                 env=dict(os.environ, DEEPBOX_STATE_DIR=state))


def test_http_sessions_cannot_see_use_or_delete_each_others_sandboxes(state, http_server):
    async def main():
        async with Client(http_transport(http_server), mode="legacy") as a, \
                Client(http_transport(http_server), mode="legacy") as b:
            wa = await a.call_tool("execute", {"command": "echo A-secret > secret.txt"})
            assert not wa.is_error, text(wa)
            a_default = sandbox_of(wa)
            made = await a.call_tool("sandbox_create", {"labels": {"who": "a"}})
            a_made = made.structured_content["sandbox_id"]
            assert made.structured_content["labels"]["deepbox.dev/mcp-owner"]

            listed = await b.call_tool("sandbox_list", {})
            assert listed.structured_content["sandboxes"] == []
            for sid in (a_default, a_made):
                r = await b.call_tool("read_file", {"file_path": "secret.txt", "sandbox_id": sid})
                assert r.is_error and f"no sandbox '{sid}' that this client can use" in text(r)
                e = await b.call_tool("execute", {"command": "echo B >> secret.txt",
                                                  "sandbox_id": sid})
                assert e.is_error
                d = await b.call_tool("sandbox_delete", {"sandbox_id": sid})
                assert d.is_error and f"no sandbox '{sid}'" in text(d)
            # B's own default is another sandbox; A's files are untouched.
            wb = await b.call_tool("execute", {"command": "cat secret.txt"})
            assert sandbox_of(wb) not in (a_default, a_made)
            again = await a.call_tool("read_file", {"file_path": "secret.txt"})
            assert "A-secret" in text(again) and sandbox_of(again) == a_default
            mine = await a.call_tool("sandbox_list", {})
            assert {s["sandbox_id"] for s in mine.structured_content["sandboxes"]} == {
                a_default, a_made}
            forged = await b.call_tool("sandbox_create",
                                       {"labels": {"deepbox.dev/mcp-owner": "x"}})
            assert forged.is_error and "reserved" in text(forged)

    anyio.run(main)


def test_sandboxes_made_elsewhere_are_invisible_unless_attached(state):
    cli = run_deepbox(state, "sandbox", "create", "--ttl", "600", "--network", "none",
                      "-l", "deepbox.dev/mcp=cli", "-l", "who=cli").stdout.strip()

    async def main(args, attached):
        async with Client(stdio_server(state, "--ttl", "900", *args)) as client:
            listed = await client.call_tool("sandbox_list", {})
            ids = [s["sandbox_id"] for s in listed.structured_content["sandboxes"]]
            assert ids == ([cli] if attached else [])
            ran = await client.call_tool("execute", {"command": "echo hi", "sandbox_id": cli})
            assert ran.is_error != attached, text(ran)
            d = await client.call_tool("sandbox_delete", {"sandbox_id": cli})
            assert d.is_error
            if attached:
                assert "cannot be deleted here" in text(d)

    anyio.run(main, [], False)
    anyio.run(main, ["--attach-selector", "who=cli"], True)
    assert cli in sandbox_ids(state)
    run_deepbox(state, "sandbox", "rm", cli)


def test_the_servers_network_ttl_and_caps_bound_sandbox_create(state):
    async def main():
        async with Client(stdio_server(state, "--network", "none", "--ttl", "900",
                                       "--max-sandboxes-per-client", "2")) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            net = tools["sandbox_create"].input_schema["properties"]["network"]["description"]
            assert "none, the default and the only one this server allows" in net
            for network in ("public", "allow=example.com"):
                r = await client.call_tool("sandbox_create", {"network": network})
                assert r.is_error
                assert f"network '{network}' is not allowed" in text(r)
                assert "--network none" in text(r)
            zero = await client.call_tool("sandbox_create", {"ttl_seconds": 0})
            assert zero.is_error and "at most 900 seconds (deepbox mcp --ttl 900)" in text(zero)
            long = await client.call_tool("sandbox_create", {"ttl_seconds": 901})
            assert long.is_error
            assert sandbox_ids(state) == []
            first = await client.call_tool("sandbox_create", {})
            assert first.structured_content["network"] == "none"
            assert first.structured_content["expires_at"] is not None
            second = await client.call_tool("execute", {"command": "true"})  # the default counts
            assert not second.is_error
            third = await client.call_tool("sandbox_create", {})
            assert third.is_error
            assert "--max-sandboxes-per-client 2" in text(third)
            assert len(sandbox_ids(state)) == 2

    anyio.run(main)


def test_stateless_http_clients_get_no_shared_default(state, http_server):
    async def main():
        async with Client(http_transport(http_server)) as x, \
                Client(http_transport(http_server)) as y:
            assert x.protocol_version == "2026-07-28"
            for c in (x, y):
                r = await c.call_tool("write_file", {"file_path": "x.txt", "content": "X"})
                assert r.is_error and "sandbox_id is required" in text(r)
                assert "sandbox_create" in text(r)
        assert sandbox_ids(state) == []

    anyio.run(main)


MODERN_META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
               "io.modelcontextprotocol/clientCapabilities": {}}


def test_a_new_server_reaps_the_default_sandbox_of_a_dead_one(state):
    env = dict(os.environ, DEEPBOX_STATE_DIR=state)
    server = subprocess.Popen([DEEPBOX, "mcp", "--ttl", "900"], env=env, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "execute", "arguments": {"command": "true"},
                           "_meta": MODERN_META}}
        server.stdin.write(json.dumps(call) + "\n")
        server.stdin.flush()
        reply = json.loads(server.stdout.readline())
        orphan = reply["result"]["_meta"]["dev.deepbox/sandbox_id"]
    finally:
        server.kill()  # SIGKILL: no cleanup
        server.wait()
    assert orphan in sandbox_ids(state)
    mine = run_deepbox(state, "sandbox", "create", "--ttl", "600", "--network", "none",
                       "-l", "deepbox.dev/mcp=cli").stdout.strip()
    raw_stdio(state, ['{"jsonrpc":"2.0","id":1,"method":"ping"}'])
    assert sandbox_ids(state) == [mine]  # the orphan only
    run_deepbox(state, "sandbox", "rm", mine)


def supervisor_pid(state, sid):
    with open(os.path.join(state, "sandboxes", sid, "meta.json")) as f:
        return json.load(f)["supervisor"]["pid"]


def test_a_dead_sandbox_is_one_clear_error_and_its_replacement_is_announced(state):
    async def main():
        async with Client(stdio_server(state, "--ttl", "900")) as client:
            w = await client.call_tool("write_file", {"file_path": "work.txt", "content": "w"})
            old = sandbox_of(w)
            os.kill(supervisor_pid(state, old), signal.SIGKILL)
            # `sandbox ls` notices (and cleans up) a sandbox whose supervisor died.
            wait_until(lambda: old not in sandbox_ids(state), what="the sandbox reaped")
            r = await client.call_tool("read_file", {"file_path": "work.txt"})
            assert r.is_error
            assert old in text(r) and "is gone" in text(r), text(r)
            assert "files are lost" in text(r)
            assert state not in text(r) and "unix:" not in text(r)
            assert "ECONNREFUSED" not in text(r)
            n = await client.call_tool("read_file", {"file_path": "work.txt"})
            new = sandbox_of(n)
            assert new != old
            assert text(n).startswith(f"Note: this call ran in a new, empty default sandbox ({new})")
            assert "file_not_found" in text(n)

    anyio.run(main)


def test_long_execute_output_keeps_head_and_tail(state):
    async def main():
        async with Client(stdio_server(state, "--ttl", "900")) as client:
            r = await client.call_tool("execute", {"command":
                "yes | head -c 5000000; echo; echo IMPORTANT-ERROR-AT-END; exit 1"})
            t = text(r)
            assert len(t) < 82000
            assert "IMPORTANT-ERROR-AT-END\n\n[Command failed with exit code 1]" in t
            assert "bytes omitted" in t
            path = r.structured_content["output_file"]
            assert f"All of it is saved in {path}" in t
            tail = await client.call_tool("execute", {"command": f"wc -c < {path}; tail -c 60 {path}"})
            assert text(tail).startswith(str(5000000 + 1 + 23 + len("\n[Command failed with exit code 1]")))
            assert "IMPORTANT-ERROR-AT-END" in text(tail)

    anyio.run(main)
