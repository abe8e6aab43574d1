"""Per tool call from Python: DeepboxSandbox (native daemon API) vs deepagents' stock BaseSandbox.

Both run against the same deepbox sandbox in the same process (native
blocks around the stock block), so the ratio compares like with like. The stock side is
deepagents' own ``BaseSandbox`` whose only primitives (execute, upload,
download) are deepbox's: every file operation runs a python3 script in the
sandbox, as with any BaseSandbox provider.

Also times the seed's flow end to end (examples/python with the scripted
model: sandbox create, agent run, verification, delete) with each backend.

    python bench/python/bench_tools.py [--rounds 30] [--flows 3] [--json out.json]

Needs the deepbox binary (PATH or DEEPBOX_BIN); DEEPBOX_SANDBOXD picks the
daemon (use a release build for meaningful absolute figures).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from deepagents import create_deep_agent
from deepagents.backends.protocol import ExecuteResponse, FileDownloadResponse, FileUploadResponse
from deepagents.backends.sandbox import BaseSandbox

from deepbox import Sandbox
from deepbox.deepagents import DeepboxSandbox

REPO = Path(__file__).resolve().parents[2]
TREE = "/workspace/tree"


class StockSandbox(BaseSandbox):
    """deepagents' stock path: only execute/upload/download come from deepbox."""

    def __init__(self, native: DeepboxSandbox) -> None:
        self._n = native

    @property
    def id(self) -> str:
        return self._n.id

    def execute(self, command: str, *, timeout: int | None = None) -> ExecuteResponse:
        return self._n.execute(command, timeout=timeout)

    def upload_files(self, files: list[tuple[str, bytes]]) -> list[FileUploadResponse]:
        return self._n.upload_files(files)

    def download_files(self, paths: list[str]) -> list[FileDownloadResponse]:
        return self._n.download_files(paths)


def make_tree(sb: Sandbox) -> None:
    """1,000 files: 10 directories x 100 Python files of 40 lines; every 10th file holds 'needle'."""
    script = (
        "import os\n"
        f"root = {TREE!r}\n"
        "for d in range(10):\n"
        "    os.makedirs(f'{root}/pkg{d}', exist_ok=True)\n"
        "    for f in range(100):\n"
        "        lines = [f'def fn_{d}_{f}_{i}(x):  # line {i}' for i in range(40)]\n"
        "        if f % 10 == 0:\n"
        "            lines[20] = 'needle = True'\n"
        "        open(f'{root}/pkg{d}/mod{f}.py', 'w').write('\\n'.join(lines) + '\\n')\n"
    )
    r = sb.exec(["python3", "-c", script], timeout=120)
    assert r.ok, r.text
    n = sb.exec(f"find {TREE} -type f | wc -l").text.strip()
    assert n == "1000", n


def ops(backend: Any, edit_target: str) -> dict[str, Callable[[], Any]]:
    def write() -> Any:
        return backend.write("/workspace/out/w.txt", "hello\n" * 50)

    state = {"flip": False}

    def edit() -> Any:
        state["flip"] = not state["flip"]
        a, b = ("needle = True", "needle = False") if state["flip"] else ("needle = False", "needle = True")
        return backend.edit(edit_target, a, b)

    return {
        "read_file": lambda: backend.read(f"{TREE}/pkg3/mod42.py", 0, 100),
        "write_file": write,  # same content each time: an overwrite
        "edit_file": edit,
        "ls": lambda: backend.ls(f"{TREE}/pkg3"),
        "grep": lambda: backend.grep("needle", TREE),
        "glob": lambda: backend.glob("**/*.py", TREE),
    }


def check(name: str, result: Any) -> None:
    err = getattr(result, "error", None)
    if err:
        raise RuntimeError(f"{name}: {err}")


def p50(xs: list[float]) -> float:
    return statistics.median(xs)


def bench_tools(sb: Sandbox, rounds: int) -> dict[str, dict[str, float]]:
    native = DeepboxSandbox(sb)
    stock = StockSandbox(native)
    # Each side edits its own file (the edit flips a line back and forth).
    n_ops, s_ops = ops(native, f"{TREE}/pkg3/mod40.py"), ops(stock, f"{TREE}/pkg3/mod50.py")
    out: dict[str, dict[str, float]] = {}
    for name in n_ops:
        for fn in (n_ops[name], s_ops[name]):  # warm up (connections, page cache)
            for _ in range(3):
                check(name, fn())
        # Blocks, not alternation: a stock call leaves a python3 exiting in the
        # sandbox, which would be billed to the next native call. Native blocks
        # before and after the stock block cancel out drift.
        nt: list[float] = []
        st: list[float] = []
        for fn, acc, n in ((n_ops[name], nt, rounds * 3), (s_ops[name], st, rounds), (n_ops[name], nt, rounds * 3)):
            for _ in range(n):
                t = time.perf_counter()
                r = fn()
                acc.append(time.perf_counter() - t)
                check(name, r)
        # The two sides must agree on what they found.
        if name in ("grep", "glob"):
            assert len(n_ops[name]().matches) == len(s_ops[name]().matches), name
        out[name] = {"deepbox_p50_ms": p50(nt) * 1e3, "stock_p50_ms": p50(st) * 1e3, "ratio": p50(st) / p50(nt)}
    return out


def load_example() -> Any:
    spec = importlib.util.spec_from_file_location("deepbox_example_main", REPO / "examples" / "python" / "main.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run_flow(example: Any, stock: bool) -> float:
    t = time.perf_counter()
    with Sandbox.create(labels={"deepagents.example/claim": "true", "deepbox.bench/python": "true"}, ttl=600, network="none") as sb:
        native = DeepboxSandbox(sb)
        backend = StockSandbox(native) if stock else native
        agent = create_deep_agent(model=example.ScriptedChatModel(), backend=backend)
        agent.invoke({"messages": [{"role": "user", "content": example.TASK}]})
        r = sb.exec(["python3", "fib.py"], cwd="/workspace", timeout=60)
        ok, detail = example.check_fibonacci_output(r.text)
        assert ok, detail
    return time.perf_counter() - t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--flows", type=int, default=3)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    with Sandbox.create(labels={"deepbox.bench/python": "true"}, ttl=1800, network="none") as sb:
        info = sb.client.info()
        make_tree(sb)
        tools = bench_tools(sb, args.rounds)
    print(f"daemon {info.get('version')} | {args.rounds} rounds per tool | p50 per call")
    print(f"{'tool':<11} {'DeepboxSandbox':>15} {'stock BaseSandbox':>18} {'ratio':>7}")
    for name, r in tools.items():
        print(f"{name:<11} {r['deepbox_p50_ms']:>12.3f} ms {r['stock_p50_ms']:>15.3f} ms {r['ratio']:>6.1f}x")

    example = load_example()
    flows = {"deepbox": [], "stock": []}
    for _ in range(args.flows):
        flows["deepbox"].append(run_flow(example, stock=False))
        flows["stock"].append(run_flow(example, stock=True))
    fd, fs = p50(flows["deepbox"]), p50(flows["stock"])
    print(f"seed flow (create, scripted agent, verify, delete), p50 of {args.flows}: "
          f"DeepboxSandbox {fd * 1e3:.0f} ms, stock BaseSandbox {fs * 1e3:.0f} ms, ratio {fs / fd:.2f}x")
    if args.json:
        Path(args.json).write_text(json.dumps({"tools": tools, "flow_s": flows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
