"""Deep Agents on deepbox: the seed's Python example on a deepbox sandbox.

Claims a sandbox labelled ``deepagents.example/claim=true`` with a TTL, asks
a deepagents agent (backend: ``DeepboxSandbox``) to write and run a
Fibonacci script, prints the agent's answer, verifies the work inside the
sandbox (re-runs ``python3 fib.py`` and checks the sequence 0, 1, 1, 2, 3, 5,
8, 13, 21, 34 in any print format), deletes the sandbox on every exit path,
and exits non-zero when the verification fails.

The model is Claude (``claude-sonnet-4-6``) when ``ANTHROPIC_API_KEY`` is
set; without it a scripted chat model plays the model's turns (and says so):
the tools still run for real in a real sandbox, and the verification is real.

Usage::

    python examples/python/main.py [--ttl 600] [--sandbox local|k8s] [--network none|public|allow=HOST,...]

Environment: ``ANTHROPIC_API_KEY``, ``DEEPBOX_EXAMPLE_MODEL`` (default
``anthropic:claude-sonnet-4-6``), ``DEEPBOX_BIN``, ``AGENT_SANDBOX_NAMESPACE``
(k8s), ``DEEPBOX_ROUTER_URL`` (k8s).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
import uuid
from collections.abc import Sequence
from typing import Any

from deepagents import create_deep_agent
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult

from deepbox import Sandbox
from deepbox.deepagents import DeepboxSandbox

TASK = (
    "Write a Python script /workspace/fib.py that prints the first 10 Fibonacci numbers "
    "(starting 0, 1), then run it with `python3 /workspace/fib.py` and tell me what it printed."
)
CLAIM_LABEL = "deepagents.example/claim"
RUN_LABEL = "deepagents.example/run"
EXPECTED = [0, 1, 1, 2, 3, 5, 8, 13, 21, 34]
# The seed's success line ("in the pod" on Kubernetes, as the C++ example says it).
SUCCESS = "Sandbox verification passed: fib.py runs in the {where} and prints the expected sequence."

FIB_PY = "a, b = 0, 1\nfor _ in range(10):\n    print(a)\n    a, b = b, a + b\n"
# For the test that a failed verification exits non-zero.
WRONG_PY = "a, b = 1, 1\nfor _ in range(10):\n    print(a)\n    a, b = b, a + b\n"


class ScriptedChatModel(BaseChatModel):
    """Plays the model's turns from a fixed script (no API key, no network).

    Turn 1 writes fib.py, turn 2 runs it, turn 3 reports what the execute
    tool returned (read from the conversation, so the answer is real).
    """

    script: str = FIB_PY

    @property
    def _llm_type(self) -> str:
        return "deepbox-scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedChatModel:
        return self

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        tool_results = [m for m in messages if isinstance(m, ToolMessage)]
        if not tool_results:
            msg = AIMessage(
                content="I'll write the script.",
                tool_calls=[
                    {
                        "name": "write_file",
                        "args": {"file_path": "/workspace/fib.py", "content": self.script},
                        "id": f"call_{uuid.uuid4().hex[:12]}",
                        "type": "tool_call",
                    }
                ],
            )
        elif len(tool_results) == 1:
            msg = AIMessage(
                content="Now I'll run it.",
                tool_calls=[
                    {
                        "name": "execute",
                        "args": {"command": "python3 /workspace/fib.py"},
                        "id": f"call_{uuid.uuid4().hex[:12]}",
                        "type": "tool_call",
                    }
                ],
            )
        else:
            printed = str(tool_results[-1].content).strip()
            msg = AIMessage(content=f"I wrote /workspace/fib.py and ran it. It printed:\n{printed}")
        return ChatResult(generations=[ChatGeneration(message=msg)])


def _numbers(line: str) -> list[float]:
    return [float(x) for x in re.findall(r"-?\d+(?:\.\d+)?", line)]


def _contains_run(values: list[float]) -> bool:
    n = len(EXPECTED)
    return any(values[i : i + n] == [float(x) for x in EXPECTED] for i in range(len(values) - n + 1))


def check_fibonacci_output(output: str) -> tuple[bool, str]:
    """Whether ``output`` prints 0, 1, 1, ..., 34 in any format (lists, one per line, ``F(3) = 2``)."""
    lines = [nums for nums in (_numbers(ln) for ln in output.splitlines()) if nums]
    every = [x for nums in lines for x in nums]
    last = [nums[-1] for nums in lines]
    first = [nums[0] for nums in lines]
    if _contains_run(every) or _contains_run(last) or _contains_run(first):
        return True, ""
    shown = ", ".join(f"{x:g}" for x in every[:20]) + (", ..." if len(every) > 20 else "")
    return False, f"expected the sequence 0, 1, 1, 2, 3, 5, 8, 13, 21, 34; the output holds the numbers [{shown}]"


def make_model(scripted: str | None) -> Any:
    if scripted is None and os.environ.get("ANTHROPIC_API_KEY"):
        return os.environ.get("DEEPBOX_EXAMPLE_MODEL", "anthropic:claude-sonnet-4-6")
    print(
        "ANTHROPIC_API_KEY is not set: a scripted chat model plays the model's turns "
        "(a scripted conversation, not a live model); the tools and the verification are real",
        file=sys.stderr,
    )
    return ScriptedChatModel(script=WRONG_PY if scripted == "wrong" else FIB_PY)


def claim(args: argparse.Namespace, run_id: str) -> Sandbox:
    labels = {CLAIM_LABEL: "true", RUN_LABEL: run_id}
    if args.sandbox == "k8s":
        return Sandbox.claim(
            namespace=os.environ.get("AGENT_SANDBOX_NAMESPACE", "default"),
            warm_pool="deepagents-warmpool",
            labels=labels,
            ttl=args.ttl,
            router_url=os.environ.get("DEEPBOX_ROUTER_URL"),
        )
    return Sandbox.create(labels=labels, ttl=args.ttl, network=args.network)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ttl", type=int, default=600, help="seconds until the sandbox deletes itself (default 600)")
    parser.add_argument("--sandbox", choices=("local", "k8s"), default="local")
    parser.add_argument(
        "--network",
        default=None,
        help="local sandboxes: none (loopback only), public, or allow=HOST[,HOST...] "
        "(default: deepbox's, public where this host supports it); the flow itself needs no network",
    )
    # Tests: force the scripted model, optionally one that writes a wrong script.
    parser.add_argument("--scripted", choices=("fib", "wrong"), default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    # SIGTERM/SIGINT unwind through the finally below, which deletes the sandbox.
    def on_signal(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    model = make_model(args.scripted)
    if args.network and args.sandbox == "k8s":
        parser.error("--network applies to local sandboxes (a cluster's NetworkPolicy decides a pod's network)")
    sb = claim(args, uuid.uuid4().hex[:12])
    network = sb.meta.get("network")
    shown = f", network {network}" if isinstance(network, str) and network else ""
    print(f"Claimed sandbox {sb.id} (TTL {args.ttl} s{shown})", file=sys.stderr)
    try:
        backend = DeepboxSandbox(sb)
        agent = create_deep_agent(model=model, backend=backend, system_prompt="You are a careful Python developer.")
        result = agent.invoke({"messages": [{"role": "user", "content": TASK}]})
        for m in result["messages"]:
            for call in getattr(m, "tool_calls", None) or []:
                shown = call["args"].get("command") or call["args"].get("file_path") or ""
                print(f"[tool] {call['name']} {shown}", file=sys.stderr)
        print(result["messages"][-1].text if hasattr(result["messages"][-1], "text") else result["messages"][-1].content)

        check = sb.exec(["python3", "fib.py"], cwd="/workspace", timeout=60)
        ok, detail = check_fibonacci_output(check.text)
        if check.returncode != 0 or not ok:
            why = f"exit code {check.returncode}: {check.text[-500:]}" if check.returncode != 0 else detail
            print(f"Sandbox verification FAILED: {why}", file=sys.stderr)
            return 1
        print(SUCCESS.format(where="pod" if args.sandbox == "k8s" else "sandbox"))
        return 0
    finally:
        sb.delete()
        print(f"Deleted sandbox {sb.id}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
