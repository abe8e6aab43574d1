"""deepagents (Python) using deepbox's MCP tools through langchain-mcp-adapters:
a deep agent with a scripted model (no API key) writes fib.py and runs it in a
deepbox sandbox, every tool call going through `deepbox mcp`. This client is
built on the 1.x SDK, so it speaks the 2025-11-25 initialize handshake."""

import os
import uuid
from typing import Any, Sequence

import anyio
from deepagents import create_deep_agent
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_mcp_adapters.client import MultiServerMCPClient
from langchain_mcp_adapters.tools import load_mcp_tools

from conftest import DEEPBOX, sandbox_ids, wait_until

FIB_PY = "a, b = 0, 1\nfor _ in range(10):\n    print(a)\n    a, b = b, a + b\n"


def content_text(message):
    """A tool message's text: langchain-mcp-adapters gives a list of content blocks."""
    c = message.content
    if isinstance(c, str):
        return c
    return "".join(b.get("text", "") if isinstance(b, dict) else str(b) for b in c)


class ScriptedChatModel(BaseChatModel):
    """Turn 1 writes fib.py, turn 2 runs it, turn 3 reports what execute returned."""

    @property
    def _llm_type(self) -> str:
        return "deepbox-scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> "ScriptedChatModel":
        names = {getattr(t, "name", None) for t in tools}
        assert {"deepbox_write_file", "deepbox_execute"} <= names, names
        return self

    def _generate(self, messages: list[BaseMessage], stop=None, run_manager=None,
                  **kwargs: Any) -> ChatResult:
        results = [m for m in messages if isinstance(m, ToolMessage)]

        def call(name, args):
            return AIMessage(content="", tool_calls=[{"name": name, "args": args,
                                                      "id": f"call_{uuid.uuid4().hex[:12]}",
                                                      "type": "tool_call"}])

        if not results:
            msg = call("deepbox_write_file", {"file_path": "/workspace/fib.py", "content": FIB_PY})
        elif len(results) == 1:
            msg = call("deepbox_execute", {"command": "python3 /workspace/fib.py"})
        else:
            msg = AIMessage(content=f"fib.py printed:\n{content_text(results[-1])}")
        return ChatResult(generations=[ChatGeneration(message=msg)])


def test_deepagents_writes_and_runs_fib_through_deepbox_mcp(state):
    client = MultiServerMCPClient({
        "deepbox": {
            "transport": "stdio",
            "command": DEEPBOX,
            "args": ["mcp", "--ttl", "900"],
            "env": dict(os.environ, DEEPBOX_STATE_DIR=state),
        }
    })

    async def main():
        # One session for the whole run, so every call uses the same default sandbox.
        async with client.session("deepbox") as session:
            tools = await load_mcp_tools(session, server_name="deepbox", tool_name_prefix=True)
            agent = create_deep_agent(model=ScriptedChatModel(), tools=tools)
            out = await agent.ainvoke({"messages": [
                {"role": "user", "content": "Write fib.py and run it"}]})
            ids = sandbox_ids(state)
            return out, ids

    out, ids = anyio.run(main)
    assert len(ids) == 1  # the session's default sandbox, while it was open
    messages = out["messages"]
    tool_msgs = [m for m in messages if isinstance(m, ToolMessage)]
    assert [m.name for m in tool_msgs] == ["deepbox_write_file", "deepbox_execute"]
    assert content_text(tool_msgs[0]) == "Updated file /workspace/fib.py"
    printed = content_text(tool_msgs[1])
    assert printed == ("0\n1\n1\n2\n3\n5\n8\n13\n21\n34\n\n"
                       "[Command succeeded with exit code 0]"), printed
    assert messages[-1].content.endswith("21\n34\n\n[Command succeeded with exit code 0]")
    wait_until(lambda: sandbox_ids(state) == [], what="the default sandbox deleted")
