"""The scripted Fibonacci conversation through Python deepagents.

Benchmark harness only (it drives the upstream reference component,
deepagents, so that bench_agent has something to be compared with; nothing
here is product code). compare_deepagents.sh runs it; see ../README.md.

The same JSONL replay file that bench_agent replays (examples/fib/
fib.replay.jsonl) becomes a chat model that answers each call with the
recorded AIMessage and its tool calls, in order, at once. The agent is
deepagents.create_deep_agent with its defaults plus langchain's
TodoListMiddleware (the script calls write_todos; deepagents 0.7 no longer
adds it by default, deepbox does). The backend is a BaseSandbox subclass whose
three primitives (execute, upload_files, download_files) talk to a real
deepbox-sandboxd, inside a real local deepbox sandbox, over its unix socket
with the daemon's upstream python-runtime API (POST /execute, POST /upload,
GET /download/...). Everything else (read, write, ls, ...) is deepagents' own
BaseSandbox code on top of execute().

Prints a table and one DEEPAGENTS_FIB line for compare_deepagents.sh.
"""

import time

_T_START = time.perf_counter()

import argparse  # noqa: E402
import http.client  # noqa: E402
import importlib.metadata  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import posixpath  # noqa: E402
import shlex  # noqa: E402
import socket  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
import urllib.parse  # noqa: E402
import uuid  # noqa: E402

from deepagents import create_deep_agent  # noqa: E402
from deepagents.backends.protocol import (  # noqa: E402
    ExecuteResponse,
    FileDownloadResponse,
    FileUploadResponse,
)
from deepagents.backends.sandbox import BaseSandbox  # noqa: E402
from langchain.agents.middleware import TodoListMiddleware  # noqa: E402
from langchain_core.language_models.chat_models import BaseChatModel  # noqa: E402
from langchain_core.messages import AIMessage, ToolMessage  # noqa: E402
from langchain_core.outputs import ChatGeneration, ChatResult  # noqa: E402
from pydantic import PrivateAttr  # noqa: E402

IMPORT_SECONDS = time.perf_counter() - _T_START

# The task and prompt of examples/fib/main.cc (bench_agent sends the same).
FIB_TASK = (
    "Write a Python script /workspace/fib.py that prints the first 10 Fibonacci numbers "
    "(starting 0, 1), then run it with `python3 /workspace/fib.py` and tell me what it "
    "printed."
)
FIB_SYSTEM_PROMPT = "You are a careful Python developer."
FIB_EXPECTED = "0\n1\n1\n2\n3\n5\n8\n13\n21\n34\n"


class UnixHTTPConnection(http.client.HTTPConnection):
    """HTTP/1.1 (keep-alive) over a unix socket: the local sandbox's endpoint."""

    def __init__(self, path, timeout=120):
        super().__init__("localhost", timeout=timeout)
        self._socket_path = path

    def connect(self):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self._socket_path)
        self.sock = sock


class DeepboxDaemonSandbox(BaseSandbox):
    """deepagents' BaseSandbox on deepbox-sandboxd's python-runtime API.

    Adds up the time spent in the three primitives (the sandbox side of every
    tool call, HTTP client included), like bench_agent's TimedSandbox.
    """

    def __init__(self, socket_path, root="/workspace"):
        self._socket_path = socket_path
        self._root = root.rstrip("/") or "/"
        self._local = threading.local()
        self._lock = threading.Lock()
        self.busy_ns = 0
        self.calls = 0
        self.by_kind = {}  # "execute" / "upload" / "download" -> [calls, ns]

    @property
    def id(self):
        return "deepbox-local:" + self._socket_path

    def _request(self, kind, method, path, body=None, headers=None):
        t0 = time.perf_counter_ns()
        try:
            for attempt in (0, 1):
                conn = getattr(self._local, "conn", None)
                if conn is None:
                    conn = self._local.conn = UnixHTTPConnection(self._socket_path)
                try:
                    conn.request(method, path, body=body, headers=headers or {})
                    resp = conn.getresponse()
                    return resp.status, resp.read()
                except (http.client.HTTPException, OSError):
                    conn.close()
                    self._local.conn = None
                    if attempt:
                        raise
            raise AssertionError("unreachable")
        finally:
            with self._lock:
                ns = time.perf_counter_ns() - t0
                self.busy_ns += ns
                self.calls += 1
                entry = self.by_kind.setdefault(kind, [0, 0])
                entry[0] += 1
                entry[1] += ns

    def _relative(self, path):
        """The daemon's legacy paths are relative to its root."""
        if not path.startswith("/"):
            return None
        path = posixpath.normpath(path)
        if self._root == "/":
            return path.lstrip("/") or None
        if path.startswith(self._root + "/"):
            return path[len(self._root) + 1 :]
        return None

    def execute(self, command, *, timeout=None):
        # The python-runtime API splits the command with shlex and execs it
        # (no shell): run it under sh -c, as upstream's K8sAgentSandbox does.
        wrapped = "sh -c " + shlex.quote(command)
        if timeout:
            wrapped = f"timeout {int(timeout)} {wrapped}"
        status, data = self._request(
            "execute",
            "POST",
            "/execute",
            json.dumps({"command": wrapped}).encode(),
            {"Content-Type": "application/json"},
        )
        if status != 200:
            text = data.decode("utf-8", "replace")[:200]
            return ExecuteResponse(output=f"Error: sandbox answered HTTP {status}: {text}", exit_code=1)
        reply = json.loads(data)
        out, err = reply.get("stdout", ""), reply.get("stderr", "")
        if err:
            out += ("" if not out or out.endswith("\n") else "\n") + err
        return ExecuteResponse(output=out, exit_code=reply.get("exit_code"), truncated=False)

    def upload_files(self, files):
        responses = []
        for path, content in files:
            rel = self._relative(path)
            if rel is None:
                responses.append(FileUploadResponse(path=path, error="invalid_path"))
                continue
            boundary = uuid.uuid4().hex
            name = rel.replace("\\", "\\\\").replace('"', '\\"')
            body = (
                f"--{boundary}\r\n"
                f'Content-Disposition: form-data; name="file"; filename="{name}"\r\n'
                "Content-Type: application/octet-stream\r\n\r\n"
            ).encode() + content + f"\r\n--{boundary}--\r\n".encode()
            status, data = self._request(
                "upload", "POST", "/upload", body, {"Content-Type": f"multipart/form-data; boundary={boundary}"}
            )
            if status == 200:
                responses.append(FileUploadResponse(path=path, error=None))
            elif status == 403:
                responses.append(FileUploadResponse(path=path, error="permission_denied"))
            else:
                responses.append(FileUploadResponse(path=path, error=data.decode("utf-8", "replace")[:200]))
        return responses

    def download_files(self, paths):
        responses = []
        for path in paths:
            rel = self._relative(path)
            if rel is None:
                responses.append(FileDownloadResponse(path=path, error="invalid_path"))
                continue
            status, data = self._request("download", "GET", "/download/" + urllib.parse.quote(rel))
            if status == 200:
                responses.append(FileDownloadResponse(path=path, content=data))
            elif status == 403:
                responses.append(FileDownloadResponse(path=path, error="permission_denied"))
            else:
                responses.append(FileDownloadResponse(path=path, error="file_not_found"))
        return responses


def load_replay(path):
    """The model turns of a deepbox replay file (header, comments skipped)."""
    turns = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            obj = json.loads(line)
            if "deepbox_replay" in obj:
                continue
            turns.append(obj)
    return turns


class ScriptedReplayModel(BaseChatModel):
    """Answers call N with turn N of the replay file, at once.

    Checks what deepbox's ReplayModel checks: the request ends with the
    expected tool results, and each tool call names an offered tool; it also
    refuses a turn whose tool results report an error, so a run that
    completes is a run whose tools all worked.
    """

    turns: list
    _next: int = PrivateAttr(default=0)
    _tool_names: frozenset = PrivateAttr(default=frozenset())
    _busy_ns: int = PrivateAttr(default=0)

    @property
    def _llm_type(self):
        return "deepbox-bench-replay"

    def bind_tools(self, tools, *, tool_choice=None, **kwargs):
        names = set()
        for t in tools:
            if isinstance(t, dict):
                names.add(t.get("name") or t.get("function", {}).get("name"))
            else:
                names.add(getattr(t, "name", None) or getattr(t, "__name__", ""))
        self._tool_names = frozenset(names)
        return self

    @property
    def served(self):
        return self._next

    @property
    def busy_ns(self):
        return self._busy_ns

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        t0 = time.perf_counter_ns()
        if self._next >= len(self.turns):
            raise RuntimeError(f"replay exhausted after {len(self.turns)} turns")
        turn = self.turns[self._next]
        self._next += 1
        expected = turn.get("request", {}).get("tool_results")
        if expected is not None:
            want = {e["tool_call_id"] if isinstance(e, dict) else e for e in expected}
            trailing = []
            for m in reversed(messages):
                if not isinstance(m, ToolMessage):
                    break
                trailing.append(m)
            got = {m.tool_call_id for m in trailing}
            if got != want:
                raise ValueError(f"turn {self._next}: expected tool results {sorted(want)}, got {sorted(got)}")
            for m in trailing:
                text = m.content if isinstance(m.content, str) else str(m.content)
                if m.status == "error" or text.startswith("Error") or "[Command failed" in text:
                    raise ValueError(f"turn {self._next}: tool {m.name} failed: {text[:300]}")
        resp = turn["response"]
        calls = [
            {"name": c["name"], "args": c.get("input", {}), "id": c["id"], "type": "tool_call"}
            for c in resp.get("tool_calls", [])
        ]
        for c in calls:
            if self._tool_names and c["name"] not in self._tool_names:
                raise ValueError(f"turn {self._next}: tool {c['name']} is not offered: {sorted(self._tool_names)}")
        usage = resp.get("usage", {})
        inp, out = usage.get("input_tokens", 0), usage.get("output_tokens", 0)
        message = AIMessage(
            content=resp.get("text", ""),
            tool_calls=calls,
            usage_metadata={"input_tokens": inp, "output_tokens": out, "total_tokens": inp + out},
        )
        self._busy_ns += time.perf_counter_ns() - t0
        return ChatResult(generations=[ChatGeneration(message=message)])


def pct(values, p):
    """Nearest-rank percentile, as bench_agent computes it."""
    if not values:
        return 0.0
    s = sorted(values)
    i = int(p / 100.0 * (len(s) - 1) + 0.5)
    return s[min(i, len(s) - 1)]


def mean(values):
    return sum(values) / len(values) if values else 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--socket", required=True, help="the sandbox daemon's unix socket")
    ap.add_argument("--root", default="/workspace", help="the daemon's root inside the sandbox")
    ap.add_argument("--replay", required=True, help="the JSONL replay file (examples/fib/fib.replay.jsonl)")
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=2)
    args = ap.parse_args()

    turns = load_replay(args.replay)
    final_text = turns[-1]["response"].get("text", "")
    sandbox = DeepboxDaemonSandbox(args.socket, args.root)
    rows = {k: [] for k in ("create", "run", "total", "tools", "model", "harness")}
    calls = 0
    for i in range(args.warmup + args.runs):
        model = ScriptedReplayModel(turns=turns)
        sb0, calls0 = sandbox.busy_ns, sandbox.calls
        t0 = time.perf_counter_ns()
        agent = create_deep_agent(
            model=model,
            system_prompt=FIB_SYSTEM_PROMPT,
            middleware=[TodoListMiddleware()],
            backend=sandbox,
        )
        t1 = time.perf_counter_ns()
        result = agent.invoke({"messages": [{"role": "user", "content": FIB_TASK}]})
        t2 = time.perf_counter_ns()
        del agent
        t3 = time.perf_counter_ns()
        last = result["messages"][-1]
        if model.served != len(turns) or not isinstance(last, AIMessage) or last.content != final_text:
            sys.exit(f"run {i}: the scripted conversation did not complete ({model.served}/{len(turns)} turns)")
        if i < args.warmup:
            sandbox.by_kind = {}
            continue
        tools_ms = (sandbox.busy_ns - sb0) / 1e6
        model_ms = model.busy_ns / 1e6
        run_ms = (t2 - t1) / 1e6
        calls += sandbox.calls - calls0
        rows["create"].append((t1 - t0) / 1e6)
        rows["run"].append(run_ms)
        rows["total"].append((t3 - t0) / 1e6)
        rows["tools"].append(tools_ms)
        rows["model"].append(model_ms)
        rows["harness"].append(run_ms - tools_ms - model_ms)

    breakdown = ", ".join(
        f"{kind} {c / args.runs:.1f} calls {ns / 1e6 / args.runs:.2f} ms"
        for kind, (c, ns) in sorted(sandbox.by_kind.items())
    )
    check = sandbox.execute("python3 /workspace/fib.py")
    verified = check.exit_code == 0 and check.output == FIB_EXPECTED

    versions = {}
    for dist in ("deepagents", "langchain", "langchain-core", "langgraph"):
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            versions[dist] = "?"
    print(
        f"Python deepagents {versions['deepagents']} (langchain {versions['langchain']}, "
        f"langchain-core {versions['langchain-core']}, langgraph {versions['langgraph']}), "
        f"Python {sys.version.split()[0]}"
    )
    print(
        f"Scripted Fibonacci run ({os.path.basename(args.replay)}: {len(turns)} model turns), "
        f"{args.runs} runs after {args.warmup} warm-up runs, one deepbox sandbox via the "
        "python-runtime API\n"
    )
    print(f"  {'per run':<58} {'p50 ms':>9} {'p99 ms':>9} {'mean ms':>9}")
    for key, name in (
        ("create", "create_deep_agent"),
        ("run", "agent.invoke(task) (harness + tools; model time ~0)"),
        ("tools", "  of which the sandbox backend (execute/upload/download)"),
        ("model", "  of which the replayed model (_generate)"),
        ("harness", "  harness only (invoke - backend - model)"),
        ("total", "create + invoke + release"),
    ):
        v = rows[key]
        print(f"  {name:<58} {pct(v, 50):9.3f} {pct(v, 99):9.3f} {mean(v):9.3f}")
    print(f"  backend primitives per run (mean): {breakdown}")
    print(f"  imports (deepagents, langchain, ...): {IMPORT_SECONDS * 1000:.0f} ms, once per process")
    print(
        f"  backend calls per run: {calls / max(1, args.runs):.1f}; "
        f"fib.py verified in the sandbox: {'yes' if verified else 'NO'}"
    )
    print(
        f"DEEPAGENTS_FIB version={versions['deepagents']} runs={args.runs} "
        f"run_p50_ms={pct(rows['run'], 50):.3f} run_mean_ms={mean(rows['run']):.3f} "
        f"create_p50_ms={pct(rows['create'], 50):.3f} total_p50_ms={pct(rows['total'], 50):.3f} "
        f"total_mean_ms={mean(rows['total']):.3f} tools_p50_ms={pct(rows['tools'], 50):.3f} "
        f"harness_p50_ms={pct(rows['harness'], 50):.3f} model_p50_ms={pct(rows['model'], 50):.3f} "
        f"import_ms={IMPORT_SECONDS * 1000:.1f} verified={1 if verified else 0}"
    )
    return 0 if verified else 1


if __name__ == "__main__":
    sys.exit(main())
