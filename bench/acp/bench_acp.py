#!/usr/bin/env python3
"""ACP round trip overhead per tool call, next to `deepbox run --json`, in one run.

    bench/acp/bench_acp.py [--deepbox build/dev/bin/deepbox] [--calls 40] [--rounds 5]

A scripted model (--model replay:FILE) makes CALLS turns of one tool call
each; both sides run the same conversation against a fresh local sandbox:

  run   `deepbox run --json --model replay:FILE TASK`: the time from its
        run_start event to its run_end event, read as they arrive on stdout;
  acp   `deepbox acp --model replay:FILE` driven over stdio by a minimal
        client (raw JSON-RPC lines, no SDK): the time from sending
        session/prompt to receiving its response (session/new, which copies
        the project and claims the sandbox, is outside the timing, as the
        sandbox claim is for `run`).

Per tool call = that time / CALLS (the replayed model answers at once, so
this is the agent loop, the tool's sandbox round trip, and for ACP the
session/update notifications and, for write_file, the fs/write_text_file
round trip to the client). Rows: execute `true` and read_file in mode auto
(the same work on both sides); write_file in mode auto (ACP also reads the
old text for the diff and writes the change back through the client);
write_file in approve-all (plus a session/request_permission round trip per
call, answered at once); on request, write_file with a client without
fs/write_text_file (write-no-back: what the write-back costs) and write_file
on a project file with a client that offers fs/read_text_file, as editors
do (write-editor: the editor's text is read before each change). Rounds
alternate run and acp (and, with --baseline, a second binary) so all see
the same machine noise; the medians are reported, ratio = the median of the
rounds' acp / run. The goal (issue 25): <= 1.2x for the same work (the
first two rows).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HEADER = {"deepbox_replay": 1, "scripted": True, "model": "anthropic:claude-sonnet-4-6",
          "description": "bench/acp: one tool call per turn"}


def replay(path: Path, calls: int, tool: str) -> str:
    lines = [json.dumps(HEADER)]
    for i in range(calls):
        if tool == "execute":
            call = {"id": f"c{i}", "name": "execute", "input": {"command": "true"}}
        elif tool == "read":
            call = {"id": f"c{i}", "name": "read_file", "input": {"file_path": "/workspace/README.md"}}
        elif tool == "write-project":  # the same project file each time
            call = {"id": f"c{i}", "name": "write_file",
                    "input": {"file_path": "/workspace/README.md", "content": f"line {i}\n"}}
        else:
            call = {"id": f"c{i}", "name": "write_file",
                    "input": {"file_path": f"/workspace/out/f{i}.txt", "content": f"line {i}\n"}}
        lines.append(json.dumps({"response": {"tool_calls": [call]}}))
    lines.append(json.dumps({"response": {"text": "done"}}))
    path.write_text("\n".join(lines) + "\n")
    return f"replay:{path}"


def time_run(deepbox: str, model: str, project: Path, env: dict) -> float:
    p = subprocess.Popen([deepbox, "run", "--json", "--model", model, "--network", "none", "go"],
                         cwd=project, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, env=env, text=True)
    start = end = None
    assert p.stdout
    for line in p.stdout:
        ev = json.loads(line)
        if ev["type"] == "run_start":
            start = time.perf_counter()
        elif ev["type"] == "run_end":
            end = time.perf_counter()
            if ev["stop_reason"] != "completed":
                sys.exit(f"run: {ev}")
    p.wait()
    assert start is not None and end is not None
    return end - start


def time_acp(deepbox: str, model: str, project: Path, env: dict, mode: str,
             write_back: bool = True, editor_reads: bool = False) -> float:
    p = subprocess.Popen([deepbox, "acp", "--model", model, "--mode", mode, "--network", "none"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                         env=env, text=True, bufsize=1)
    assert p.stdin and p.stdout

    def send(obj: dict) -> None:
        p.stdin.write(json.dumps(obj) + "\n")
        p.stdin.flush()

    def until(request_id: int) -> dict:
        for line in p.stdout:
            m = json.loads(line)
            if m.get("method") == "session/request_permission":
                send({"jsonrpc": "2.0", "id": m["id"],
                      "result": {"outcome": {"outcome": "selected", "optionId": "allow_once"}}})
            elif m.get("method") == "fs/read_text_file":
                text = Path(m["params"]["path"]).read_text()
                send({"jsonrpc": "2.0", "id": m["id"], "result": {"content": text}})
            elif m.get("method") == "fs/write_text_file":
                path = Path(m["params"]["path"])
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(m["params"]["content"])
                send({"jsonrpc": "2.0", "id": m["id"], "result": None})
            elif m.get("id") == request_id and "method" not in m:
                if "error" in m:
                    sys.exit(f"acp: {m['error']}")
                return m["result"]
        sys.exit("acp: the agent closed its stdout")

    send({"jsonrpc": "2.0", "id": 1, "method": "initialize",
          "params": {"protocolVersion": 1,
                     "clientCapabilities": {"fs": {"readTextFile": editor_reads,
                                                   "writeTextFile": write_back}}}})
    until(1)
    send({"jsonrpc": "2.0", "id": 2, "method": "session/new",
          "params": {"cwd": str(project), "mcpServers": []}})
    sid = until(2)["sessionId"]
    t0 = time.perf_counter()
    send({"jsonrpc": "2.0", "id": 3, "method": "session/prompt",
          "params": {"sessionId": sid, "prompt": [{"type": "text", "text": "go"}]}})
    result = until(3)
    took = time.perf_counter() - t0
    if result["stopReason"] != "end_turn":
        sys.exit(f"acp: {result}")
    p.stdin.close()
    p.wait()
    return took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--deepbox", default="build/dev/bin/deepbox")
    ap.add_argument("--baseline", metavar="DEEPBOX",
                    help="another deepbox binary (e.g. before a change) measured in the same "
                         "rounds: each round runs both, so both see the same machine noise")
    ap.add_argument("--calls", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--rows", default="execute,read,write,write-approve",
                    help="which rows, comma-separated: execute, read, write, write-approve, "
                         "write-no-back (a client without fs/write_text_file: the write-back's "
                         "share of the write row), write-editor (write_file on a project file, "
                         "the client offering fs/read_text_file, as editors do)")
    ap.add_argument("--project-files", type=int, default=1,
                    help="files in the project (100 per directory): after each command deepbox "
                         "acp lists the sandbox's copy to find what the command changed, a cost "
                         "that grows with the project")
    args = ap.parse_args()
    binaries = [("", str(Path(args.deepbox).resolve()))]
    if args.baseline:
        binaries.insert(0, ("baseline ", str(Path(args.baseline).resolve())))
    work = Path(tempfile.mkdtemp(prefix="dbacpb-", dir="/tmp"))
    env = dict(os.environ, DEEPBOX_STATE_DIR=str(work / "s"))
    try:
        all_rows = {"execute": ("execute `true`", "execute", "auto", True),
                    "read": ("read_file", "read", "auto", True),
                    "write": ("write_file", "write", "auto", True),
                    "write-approve": ("write_file, approve-all", "write", "approve-all", True),
                    "write-no-back": ("write_file, no write-back", "write", "auto", False),
                    "write-editor": ("write_file, editor reads", "write-project",
                                     "auto", True)}
        rows = [all_rows[r] for r in args.rows.split(",")]
        print(f"{args.calls} tool calls per prompt, {args.rounds} alternating rounds, "
              f"{args.project_files} project files; "
              "ms per tool call (median); ratio = median of the rounds' acp/run")
        print(f"{'row':37} {'run --json':>10} {'acp':>10} {'ratio':>7}")
        for name, tool, mode, write_back in rows:
            model = replay(work / f"{tool}.jsonl", args.calls, tool)
            runs = {b: [] for _, b in binaries}
            acps = {b: [] for _, b in binaries}
            steps = [(b, side) for _, b in binaries for side in ("run", "acp")]
            for r in range(args.rounds):
                # A different order each round: no side is always first.
                for b, side in steps[r % len(steps):] + steps[:r % len(steps)]:
                    project = work / f"p-{len(list(work.iterdir()))}"
                    project.mkdir()
                    (project / "README.md").write_text("bench\n")
                    for i in range(1, args.project_files):
                        sub = project / f"d{i // 100}"
                        sub.mkdir(exist_ok=True)
                        (sub / f"f{i}.txt").write_text(f"file {i}\n")
                    if side == "run":
                        runs[b].append(time_run(b, model, project, env) / args.calls)
                    else:
                        acps[b].append(time_acp(b, model, project, env, mode, write_back,
                                                editor_reads=tool == "write-project")
                                       / args.calls)
            for label, b in binaries:
                run_ms = statistics.median(runs[b]) * 1000
                acp_ms = statistics.median(acps[b]) * 1000
                ratio = statistics.median(a / r for a, r in zip(acps[b], runs[b]))
                print(f"{label + name:37} {run_ms:10.2f} {acp_ms:10.2f} {ratio:6.2f}x")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
