"""The reference side of the deepagents differential test: the pinned
deepagents package replays the scripted conversation with its tools in a
real deepbox sandbox.

Test harness only: the agent, the tools, their descriptions and every result
string are deepagents' own code. The backend is deepagents' stock
``BaseSandbox`` (ls, read, edit, grep, glob and delete are its python3 /
shell scripts run through ``execute``, write is its preflight script plus
``upload_files``): only the three primitives a sandbox provider supplies are
ours, on the daemon's native API (the whole sandbox, as commands see it):

- ``execute``: ``/bin/sh -c`` in the workspace; a timeout reports
  "Command timed out after N seconds" with exit code 124;
- ``upload_files`` / ``download_files``: the daemon's file API, its error
  codes mapped to deepagents' ``FileOperationError`` literals.

Evicted results go to /workspace/large_tool_results (a ``CompositeBackend``
with that artifacts root): deepagents' default, /large_tool_results, is on the
sandbox's read-only root, and deepbox uses <workspace>/large_tool_results.

Writes JSON: {"tools": [{name, description, parameters}], "results":
[{tool_call_id, name, content, status}], "final_text"}.
"""

import argparse
import importlib.metadata
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "python" / "src"))

from deepagents import create_deep_agent  # noqa: E402
from deepagents.backends.composite import CompositeBackend  # noqa: E402
from deepagents.backends.protocol import ExecuteResponse, FileDownloadResponse, FileUploadResponse  # noqa: E402
from deepagents.backends.sandbox import BaseSandbox  # noqa: E402
from langchain.agents.middleware import TodoListMiddleware  # noqa: E402
from langchain_core.language_models.chat_models import BaseChatModel  # noqa: E402
from langchain_core.messages import AIMessage, ToolMessage  # noqa: E402
from langchain_core.outputs import ChatGeneration, ChatResult  # noqa: E402
from langchain_core.utils.function_calling import convert_to_openai_tool  # noqa: E402
from pydantic import PrivateAttr  # noqa: E402

from deepbox.client import DaemonClient  # noqa: E402
from deepbox.errors import DaemonError, DeepboxError  # noqa: E402

DEFAULT_TIMEOUT = 1800

# Daemon error code -> deepagents FileOperationError.
_CODES = {
    "NOT_FOUND": "file_not_found",
    "PERMISSION_DENIED": "permission_denied",
    "IS_DIRECTORY": "is_directory",
    "NOT_DIRECTORY": "invalid_path",
    "INVALID_ARGUMENT": "invalid_path",
}


class ReferenceSandbox(BaseSandbox):
    """deepagents' BaseSandbox with deepbox's three primitives."""

    def __init__(self, client):
        self.client = client

    @property
    def id(self):
        return "deepbox-conformance"

    def execute(self, command, *, timeout=None):
        t = DEFAULT_TIMEOUT if timeout is None else timeout
        try:
            r = self.client.exec(command, timeout=t)
        except DeepboxError as e:
            return ExecuteResponse(output=f"Error: {e}", exit_code=None)
        output = r.text
        if r.status == "spawn_failed":
            output = f"Error: {r.error or 'the command could not be started'}"
        elif r.status == "timed_out":
            sep = "\n" if output and not output.endswith("\n") else ""
            output = f"{output}{sep}Command timed out after {t} seconds"
        return ExecuteResponse(output=output, exit_code=r.returncode, truncated=r.truncated)

    def upload_files(self, files):
        out = []
        for path, data in files:
            try:
                self.client.write(path, data)
                out.append(FileUploadResponse(path=path))
            except DaemonError as e:
                out.append(FileUploadResponse(path=path, error=_CODES.get(e.code, e.message)))
        return out

    def download_files(self, paths):
        out = []
        for path in paths:
            try:
                out.append(FileDownloadResponse(path=path, content=self.client.read_bytes(path)))
            except DaemonError as e:
                out.append(FileDownloadResponse(path=path, error=_CODES.get(e.code, e.message)))
        return out


def load_replay(path):
    turns = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            obj = json.loads(line)
            if "deepbox_replay" not in obj:
                turns.append(obj)
    return turns


class ReplayModel(BaseChatModel):
    """Answers call N with turn N of the replay file; checks, as deepbox's
    ReplayModel does, that the request ends with the expected tool results."""

    turns: list
    _next: int = PrivateAttr(default=0)
    _tools: list = PrivateAttr(default_factory=list)

    @property
    def _llm_type(self):
        return "deepbox-conformance-replay"

    def bind_tools(self, tools, *, tool_choice=None, **kwargs):
        if not self._tools:  # the main agent's (the first to bind)
            self._tools = [convert_to_openai_tool(t)["function"] for t in tools]
        return self

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        if self._next >= len(self.turns):
            raise RuntimeError(f"replay exhausted after {len(self.turns)} turns")
        turn = self.turns[self._next]
        self._next += 1
        expected = turn.get("request", {}).get("tool_results")
        if expected is not None:
            want = {e["tool_call_id"] if isinstance(e, dict) else e for e in expected}
            got = set()
            for m in reversed(messages):
                if not isinstance(m, ToolMessage):
                    break
                got.add(m.tool_call_id)
            if got != want:
                raise ValueError(f"turn {self._next}: expected tool results {sorted(want)}, got {sorted(got)}")
        resp = turn["response"]
        calls = [
            {"name": c["name"], "args": c.get("input", {}), "id": c["id"], "type": "tool_call"}
            for c in resp.get("tool_calls", [])
        ]
        message = AIMessage(content=resp.get("text", ""), tool_calls=calls)
        return ChatResult(generations=[ChatGeneration(message=message)])


def content_of(message):
    c = message.content
    if isinstance(c, str):
        return c
    return json.dumps(c, sort_keys=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--endpoint", required=True, help="the sandbox daemon (unix:/path/sandboxd.sock)")
    ap.add_argument("--replay", required=True)
    ap.add_argument("--task", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    client = DaemonClient(args.endpoint)
    root = client.root
    backend = CompositeBackend(default=ReferenceSandbox(client), routes={}, artifacts_root=root)
    model = ReplayModel(turns=load_replay(args.replay))
    agent = create_deep_agent(model=model, backend=backend, middleware=[TodoListMiddleware()])
    state = agent.invoke({"messages": [{"role": "user", "content": args.task}]}, {"recursion_limit": 1000})
    results = []
    for m in state["messages"]:
        if isinstance(m, ToolMessage):
            results.append({"tool_call_id": m.tool_call_id, "name": m.name, "content": content_of(m), "status": m.status})
    final = state["messages"][-1]
    out = {
        "deepagents": importlib.metadata.version("deepagents"),
        "tools": model._tools,
        "results": results,
        "final_text": final.content if isinstance(final.content, str) else "",
    }
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
    print(f"deepagents {out['deepagents']}: {len(results)} tool results", file=sys.stderr)


if __name__ == "__main__":
    main()
