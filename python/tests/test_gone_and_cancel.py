"""DeepboxSandbox when its sandbox goes away, when a command is cancelled, and its
other edges (newcomer audit 2026-12-03: M6, L1, L2, L9)."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest

pytest.importorskip("deepagents")

from langchain_core.language_models.chat_models import BaseChatModel  # noqa: E402
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage  # noqa: E402
from langchain_core.outputs import ChatGeneration, ChatResult  # noqa: E402

from deepbox import AsyncSandbox, DaemonClient, Sandbox, SandboxGoneError  # noqa: E402
from deepbox.deepagents import DEFAULT_MAX_CALLS_AFTER_GONE, DeepboxSandbox  # noqa: E402

LABEL = {"deepbox.test/python": "gone"}
FILE_OPERATION_ERRORS = {"file_not_found", "permission_denied", "is_directory", "invalid_path"}


def _wait(what: str, cond: Any, seconds: float = 60) -> None:
    """Polls ``cond`` (bounded); fails naming ``what``."""
    deadline = time.monotonic() + seconds
    while not cond():
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {seconds:g} s")
        time.sleep(0.1)


def _alive(sb: Sandbox, pid: int) -> bool:
    return sb.exec(["kill", "-0", str(pid)]).ok


@pytest.fixture
def fresh(deepbox_bin: str) -> Iterator[Sandbox]:
    sb = Sandbox.create(labels=LABEL, ttl=900, network="none")
    try:
        yield sb
    finally:
        sb.delete()


def _call(name: str, **args: Any) -> dict[str, Any]:
    _call.n += 1  # type: ignore[attr-defined]
    return {"name": name, "args": args, "id": f"call_{_call.n}", "type": "tool_call"}  # type: ignore[attr-defined]


_call.n = 0  # type: ignore[attr-defined]


class ScriptedModel(BaseChatModel):
    """Turn 1 writes a file; turn 2 first deletes the sandbox (``deepbox sandbox
    rm``), then calls every tool at once; every later turn calls ``execute``
    again, as a model that ignores errors would, forever."""

    sandbox_id: str
    turns: ClassVar[list[list[BaseMessage]]] = []

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedModel:
        return self

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any) -> ChatResult:
        ScriptedModel.turns.append(list(messages))
        turn = len(ScriptedModel.turns)
        if turn == 1:
            calls = [_call("write_file", file_path="/workspace/a.txt", content="precious\n")]
        elif turn == 2:
            subprocess.run([os.environ["DEEPBOX_BIN"], "sandbox", "rm", self.sandbox_id], check=True)
            calls = [
                _call("ls", path="/workspace"),
                _call("ls", path="/tmp"),  # outside the daemon's root: deepagents' stock code
                _call("read_file", file_path="/workspace/a.txt"),
                _call("write_file", file_path="/workspace/b.txt", content="x"),
                _call("edit_file", file_path="/workspace/a.txt", old_string="precious", new_string="gone"),
                _call("grep", pattern="precious", path="/workspace"),
                _call("glob", pattern="*.txt", path="/workspace"),
                _call("execute", command="cat /workspace/a.txt"),
            ]
        else:
            calls = [_call("execute", command="true")]
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content="", tool_calls=calls))])


def test_a_deleted_sandbox_is_one_clear_error_for_every_tool_and_the_agent_stops(fresh: Sandbox) -> None:
    from deepagents import create_deep_agent

    backend = DeepboxSandbox(fresh)
    ScriptedModel.turns = []
    agent = create_deep_agent(model=ScriptedModel(sandbox_id=fresh.id), backend=backend)
    with pytest.raises(SandboxGoneError) as e:
        agent.invoke({"messages": [{"role": "user", "content": "work"}]}, {"recursion_limit": 1000})
    assert e.value.sandbox_id == fresh.id
    assert e.value.cause == f"sandbox '{fresh.id}' was deleted (deepbox has no record of it any more)"

    # Turn 2's eight calls all got the same error, in each tool's result.
    third = ScriptedModel.turns[2]
    results = [m for m in third if isinstance(m, ToolMessage)][1:]
    assert len(results) == 8, [m.content for m in results]
    expected = (
        f"Error: sandbox '{fresh.id}' was deleted (deepbox has no record of it any more). "
        "Its files are lost and no tool can run in it: do not call more tools; tell the user."
    )
    state_dir = os.environ["DEEPBOX_STATE_DIR"]
    for m in results:
        assert expected in str(m.content), (m.name, m.content)
        assert "sandboxd.sock" not in str(m.content) and state_dir not in str(m.content)
    # Not left looping: the run ended after max_calls_after_gone answers.
    assert len(ScriptedModel.turns) == 2 + DEFAULT_MAX_CALLS_AFTER_GONE - 8 + 1
    # Transfers cannot say it in deepagents' codes: they raise.
    with pytest.raises(SandboxGoneError):
        backend.upload_files([("/workspace/c.txt", b"x")])
    with pytest.raises(SandboxGoneError):
        backend.download_files(["/workspace/a.txt"])


def test_an_expired_sandbox_names_its_ttl(deepbox_bin: str) -> None:
    sb = Sandbox.create(labels=LABEL, ttl=4, network="none")
    try:
        backend = DeepboxSandbox(sb)
        _wait("the sandbox expires", lambda: sb.gone_reason() is not None)
        r = backend.ls("/workspace")
        # Deleted ("expired: its TTL ran out at T") or, a moment earlier, still
        # being deleted ("expired at T (its TTL ran out); it is being deleted").
        ts = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"
        name = re.escape(f"sandbox '{sb.id}' expired")
        assert r.error is not None and re.match(
            rf"{name}(: its TTL ran out at {ts}| at {ts} \(its TTL ran out\); it is being deleted)", r.error
        ), r.error
        assert backend.execute("true").output == "Error: " + r.error  # the ls tool adds "Error: " itself
        assert "sandboxd.sock" not in r.error
    finally:
        sb.delete()


def test_a_daemon_that_does_not_answer_while_the_sandbox_exists_is_retryable(fresh: Sandbox, tmp_path) -> None:
    # The sandbox is alive; only this client cannot reach its daemon.
    blind = Sandbox(fresh.id, DaemonClient(str(tmp_path / "no.sock")), provider="local")
    backend = DeepboxSandbox(fresh)  # its root from the real daemon
    backend.sandbox, backend.client = blind, blind.client
    for _ in range(3):
        r = backend.read("/workspace/x.txt")
        assert r.error == (  # the read_file tool adds "Error: " itself
            f"sandbox '{fresh.id}' did not answer this call (its daemon may be restarting); "
            "the sandbox still exists, so the call may be retried."
        )
    assert str(tmp_path) not in backend.execute("true").output
    assert fresh.exec("true").ok


def test_deepbox_sandbox_accepts_an_async_sandbox(deepbox_bin: str) -> None:
    async def run() -> None:
        async with await AsyncSandbox.create(labels=LABEL, ttl=900, network="none") as asb:
            backend = DeepboxSandbox(asb)
            assert backend.id == asb.id
            assert (await backend.awrite("/workspace/a.txt", "hi")).error is None
            r = await backend.aexecute("cat /workspace/a.txt")
            assert (r.output, r.exit_code) == ("hi", 0)

    asyncio.run(run())


def test_cancelling_aexecute_stops_the_command(fresh: Sandbox) -> None:
    backend = DeepboxSandbox(fresh)

    async def run() -> None:
        task = asyncio.ensure_future(backend.aexecute("echo $$ > /workspace/cancel.pid; exec sleep 300"))
        for _ in range(600):
            if await asyncio.to_thread(fresh.exists, "/workspace/cancel.pid"):
                break
            await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # Checked here: asyncio.run's exit would wait for a worker thread still
        # running the command (and so see it end only when the command does).
        pid = int(fresh.read_text("/workspace/cancel.pid"))
        for _ in range(600):
            if not await asyncio.to_thread(_alive, fresh, pid):
                return
            await asyncio.sleep(0.1)
        pytest.fail(f"the cancelled command (pid {pid}) still runs 60 s after the cancel")

    asyncio.run(asyncio.wait_for(run(), 120))


CTRL_C = r"""
import faulthandler, signal, sys
# Ctrl-C as an interactive Python gets it: a test runner started as a
# background job of a non-interactive shell passes SIGINT on ignored (bash does
# that to background commands), and Python then keeps it ignored.
signal.signal(signal.SIGINT, signal.default_int_handler)
faulthandler.register(signal.SIGUSR1, all_threads=True)  # the test's view of a hang
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from deepagents import create_deep_agent
from deepbox import Sandbox
from deepbox.deepagents import DeepboxSandbox

class Model(BaseChatModel):
    @property
    def _llm_type(self): return "scripted"
    def bind_tools(self, tools, **kwargs): return self
    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        if any(isinstance(m, ToolMessage) for m in messages):
            return ChatResult(generations=[ChatGeneration(message=AIMessage(content="done"))])
        call = {"name": "execute", "args": {"command": "echo $$ > /workspace/int.pid; exec sleep 300"},
                "id": "call_1", "type": "tool_call"}
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content="", tool_calls=[call]))])

backend = DeepboxSandbox(Sandbox.attach(sys.argv[1]))
try:
    create_deep_agent(model=Model(), backend=backend).invoke({"messages": [{"role": "user", "content": "go"}]})
except KeyboardInterrupt:
    print("interrupted", flush=True)
    sys.exit(130)
print("not interrupted", flush=True)
"""


def test_ctrl_c_during_agent_invoke_stops_the_command(fresh: Sandbox) -> None:
    p = subprocess.Popen(
        [sys.executable, "-c", CTRL_C, fresh.id], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        stdin=subprocess.DEVNULL,
    )
    try:
        _wait("the command starts", lambda: fresh.exists("/workspace/int.pid") or p.poll() is not None, 300)
        assert p.poll() is None, p.communicate()
        pid = int(fresh.read_text("/workspace/int.pid"))
        p.send_signal(signal.SIGINT)
        try:
            out, err = p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            p.send_signal(signal.SIGUSR1)  # every thread's stack, to stderr
            time.sleep(2)
            p.kill()
            _, err = p.communicate()
            pytest.fail(f"Ctrl-C did not end agent.invoke within 60 s (it waits for the command); its threads:\n{err[-8000:]}")
        assert p.returncode == 130 and out.strip() == "interrupted", (p.returncode, out, err[-2000:])
        _wait(f"the interrupted command (pid {pid}) ends", lambda: not _alive(fresh, pid))
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_transfers_outside_the_workspace_give_deepagents_codes_and_leave_nothing(fresh: Sandbox) -> None:
    backend = DeepboxSandbox(fresh)
    up = backend.upload_files([("/proc/1/x", b"x"), ("/proc/x/y", b"x"), ("/usr/bin/x", b"x"), ("/tmp/t/ok.bin", b"ok")])
    assert [r.error for r in up[:3]] == ["file_not_found", "file_not_found", "permission_denied"], up
    assert up[3].error is None
    down = backend.download_files(["/tmp/t/ok.bin", "/tmp/absent", "/tmp/t"])
    assert down[0].content == b"ok"
    assert [r.error for r in down[1:]] == ["file_not_found", "is_directory"], down
    assert all(r.error in FILE_OPERATION_ERRORS for r in [*up, *down] if r.error)
    names = [e["path"] for e in backend.ls("/workspace").entries or []]
    assert not [n for n in names if ".deepbox" in n], names
