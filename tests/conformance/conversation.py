"""The scripted conversation of the deepagents differential test.

Hand-written (no model produced it): one task whose "model" makes every tool
call below, in turns; each turn's calls are independent of each other (both
harnesses may run them concurrently). Both harnesses replay it with their
tools in a real deepbox sandbox; run_deepagents_diff.sh compares every tool
result. Writes the deepbox replay format (src/agent/model/README.md):

    python3 conversation.py OUT.jsonl
"""

import json
import sys

TASK = "Exercise every tool on the fixture project in /workspace/proj and report."
P = "/workspace/proj"

# The fixture: built by the first execute call (POSIX sh + coreutils only).
SETUP = r"""set -e
rm -rf /workspace/proj /tmp/conformance
mkdir -p /workspace/proj/src/sub /workspace/proj/src/.hidden /workspace/proj/docs /workspace/proj/.git/objects /workspace/proj/empty_dir /tmp/conformance
cd /workspace/proj
i=1; while [ $i -le 150 ]; do echo "line $i"; i=$((i+1)); done > lines.txt
: > empty.txt
printf '\n\n\n' > blank.txt
printf '   \n\t\n' > spaces.txt
printf 'alpha\r\nbeta\r\ngamma\r\n' > crlf.txt
printf 'caf\351 au lait\n' > latin1.txt
printf 'PNG\000\001\002binary\000data' > blob.bin
printf 'no final newline' > nonl.txt
printf 'x = 1\nfoo = 2\nfoo = 3\nbar = foo\n' > dup.txt
printf 'def a():\n    return "needle"\n' > src/a.py
printf 'def b():\n    return "haystack needle needle"\n' > src/b.py
printf 'NEEDLE = "needle"\n' > src/sub/c.py
printf 'hidden needle\n' > src/.hidden/d.py
printf 'SECRET=needle\n' > .env
printf '# Title\nneedle in docs\n' > docs/readme.md
printf 'weird needle\n' > 'docs/weird [x].txt'
printf 'brace needle\n' > 'docs/brace{1}.md'
printf 'q needle\n' > docs/q1.txt
printf 'a.b*c and [x] and foo|bar\n' > docs/special.txt
printf 'needle in git\n' > .git/objects/pack
printf 'top needle\n' > top.txt
ln -s src/a.py link_to_a.py
head -c 100000 /dev/zero | tr '\0' 'w' > wide.txt
i=1; while [ $i -le 2000 ]; do printf 'row %04d of the big file, padded to be wide enough: %s\n' $i 0123456789abcdef; i=$((i+1)); done > big.txt
head -c 1100 /dev/zero | tr '\0' 'p' > /tmp/conformance/pline
i=0; while [ $i -lt 560 ]; do cat /tmp/conformance/pline; echo; i=$((i+1)); done > page.txt
i=0; while [ $i -lt 3 ]; do cat page.txt; i=$((i+1)); done > huge.txt
echo ready"""

_turns = []
_n = 0
# Tool call id -> [how its results may differ, why]: the deliberate
# differences (src/agent/README.md). "set": an ls result, the same paths in
# another order; "any": a documented difference.
DELIBERATE = {}

ORDER = ("set", "ls lists in name order; deepagents in directory order (os.scandir)")


def call(name, differs=None, **args):
    global _n
    _n += 1
    call_id = f"call_{_n:03d}"
    if differs:
        DELIBERATE[call_id] = list(differs)
    return {"id": call_id, "name": name, "input": args}


def turn(*calls, text=""):
    _turns.append({"text": text, "tool_calls": list(calls)})


def read(path, differs=None, **kw):
    return call("read_file", differs=differs, file_path=path, **kw)


# ------------------------------------------------------------------ fixture
turn(call("execute", command=SETUP), call("write_todos", todos=[
    {"content": "Build the fixture", "status": "in_progress"},
    {"content": "Exercise the file tools", "status": "pending"},
    {"content": "Report", "status": "pending"},
]), text="I'll set up the fixture first.")

# ------------------------------------------------------------------ ls
turn(
    call("ls", differs=ORDER, path=P),
    call("ls", differs=ORDER, path=P + "/src/"),
    call("ls", path=P + "/missing"),
    call("ls", path=P + "/lines.txt"),
    call("ls", differs=ORDER, path="/"),
    call("ls", path=P + "/empty_dir"),
    call("ls", path=P + "/../proj"),
)

# ------------------------------------------------------------------ read_file
turn(
    read(P + "/lines.txt"),
    read(P + "/lines.txt", offset=100, limit=100),
    read(P + "/lines.txt", offset=149, limit=5),
    read(P + "/lines.txt", offset=150),
    read(P + "/lines.txt", offset=200, limit=10),
    read(P + "/lines.txt", offset=-5, limit=3),
    read(P + "/lines.txt", limit=0),
    read(P + "/lines.txt", offset=3, limit=-2),
)
turn(
    read(P + "/empty.txt"),
    read(P + "/empty.txt", offset=4),
    read(P + "/blank.txt"),
    read(P + "/blank.txt", offset=1, limit=1),
    read(P + "/spaces.txt"),
    read(P + "/crlf.txt"),
    read(P + "/nonl.txt"),
    read(P + "/link_to_a.py"),
)
turn(
    read(P + "/nope.txt"),
    read(P + "/src"),
    read("/etc/os-release", limit=2),
    read(P + "/wide.txt"),
    read(P + "/big.txt", limit=2000),
    read(P + "/big.txt", offset=1990, limit=20),
    read(P + "/page.txt", limit=1000),
    read(P + "/huge.txt", offset=10, limit=5),
)
turn(
    read(P + "/latin1.txt", differs=("any", "non-UTF-8 content: deepbox describes it, deepagents sends a base64 file block")),
    read(P + "/blob.bin"),
    read("proj/lines.txt", differs=("any", "relative paths resolve against the workspace in deepbox, against / in deepagents"), limit=1),
)

# ------------------------------------------------------------------ write_file
turn(
    call("write_file", file_path=P + "/new/deep/file.txt", content="hello\nworld\n"),
    call("write_file", file_path=P + "/src", content="x"),
    call("write_file", file_path="/etc/deepbox-conformance.txt", content="x"),
    call("write_file", file_path=P + "/nonl.txt", content="replaced, still no newline"),
    call("write_file", file_path=P + "/unicode.txt", content="h\u00e9llo \u4e16\u754c \U0001f600\n"),
)
turn(
    read(P + "/new/deep/file.txt"),
    read(P + "/nonl.txt"),
    read(P + "/unicode.txt"),
)

# ------------------------------------------------------------------ edit_file
turn(
    call("edit_file", file_path=P + "/dup.txt", old_string="x = 1", new_string="x = 10"),
    call("edit_file", file_path=P + "/crlf.txt", old_string="alpha\nbeta", new_string="ALPHA\nBETA"),
    call("edit_file", file_path=P + "/missing.txt", old_string="a", new_string="b"),
    call("edit_file", file_path=P + "/latin1.txt", old_string="caf", new_string="tea"),
    call("edit_file", file_path=P + "/src", old_string="a", new_string="b"),
    call("edit_file", file_path=P + "/lines.txt", old_string="", new_string="b"),
)
turn(
    call("edit_file", file_path=P + "/dup.txt", old_string="foo", new_string="baz"),
    call("edit_file", file_path=P + "/unicode.txt", old_string="not there", new_string="b"),
    call("edit_file", file_path=P + "/missing.txt", old_string="", new_string="b"),
)
turn(
    call("edit_file", file_path=P + "/dup.txt", old_string="foo", new_string="baz", replace_all=True),
)
turn(
    read(P + "/dup.txt"),
    read(P + "/crlf.txt"),
    call("execute", command="od -c " + P + "/crlf.txt | head -n 3"),
)

# ------------------------------------------------------------------ glob
# At most 4 per turn: deepagents runs 4 globs at a time and refuses more.
turn(
    call("glob", pattern="*.py", path=P),
    call("glob", pattern="**/*.py", path=P),
    call("glob", pattern="src/**/*.py", path=P),
    call("glob", pattern="/*.txt", path=P),
)
turn(
    call("glob", pattern="*.{py,md}", path=P),
    call("glob", pattern="weird [[]x].txt", path=P),
    call("glob", pattern="q?.txt", path=P),
    call("glob", pattern=".env", path=P),
)
turn(
    call("glob", pattern="*.py", path=P + "/missing"),
    call("glob", pattern="../*.txt", path=P),
    call("glob", pattern="*.nothing", path=P),
    call("glob", pattern="**/*.md", path=P + "/docs"),
)
turn(
    call("glob", pattern="*.conf", path="/etc"),
    call("glob", pattern="*.py", path=P + "/lines.txt"),
)

# ------------------------------------------------------------------ grep
turn(
    call("grep", pattern="needle", path=P),
    call("grep", pattern="needle", path=P, output_mode="content"),
    call("grep", pattern="needle", path=P, output_mode="count"),
    call("grep", pattern="needle", path=P, glob="*.py"),
    call("grep", pattern="needle", path=P, glob="src/**/*.py", output_mode="content"),
    call("grep", pattern="line 1", path=P + "/lines.txt", max_count=3, output_mode="content"),
    call("grep", pattern="line 15", path=P + "/lines.txt", max_count=2, output_mode="count"),
)
turn(
    call("grep", pattern="foo|bar", path=P + "/src"),
    call("grep", pattern="needle", path=P + "/nowhere"),
    call("grep", pattern="a.b*c", path=P + "/docs", output_mode="content"),
    call("grep", pattern="[x]", path=P + "/docs", output_mode="content"),
    call("grep", pattern="needle", path=P + "/src/b.py", output_mode="content"),
    call("grep", pattern="needle in git", path=P),
    call("grep", pattern="needle", path=P + "/.git", output_mode="content"),
    call("grep", pattern="absent.*regex", path=P),
)

# ------------------------------------------------------------------ execute
turn(
    call("execute", command="echo out; echo err >&2; exit 3"),
    call("execute", command="sleep 5", timeout=1),
    call("execute", command="seq 1 30000"),
    call("execute", command="printf 'bad \\377 byte\\n'"),
    call("execute", command="python -c 'print(1)'"),
    call("execute", command="true", timeout=-1),
    call("execute", command="true", timeout=99999),
    call("execute", command="printf 'no newline'"),
)

# ------------------------------------------------------------------ task (a sub-agent)
turn(call("task", description="List the files of /workspace/proj/docs and report how many there are.",
          subagent_type="general-purpose"))
# The sub-agent's own turns (served in order, as the sub-agent runs).
turn(call("ls", differs=ORDER, path=P + "/docs"), text="Listing the docs directory.")
turn(text="There are 5 entries in /workspace/proj/docs.")

# ------------------------------------------------------------------ delete
turn(
    call("delete", file_path=P + "/top.txt"),
    call("delete", file_path=P + "/nothing-here"),
    call("delete", file_path=P + "/new"),
)
turn(
    call("ls", path=P + "/new"),
    call("write_todos", todos=[
        {"content": "Build the fixture", "status": "completed"},
        {"content": "Exercise the file tools", "status": "completed"},
        {"content": "Report", "status": "in_progress"},
    ]),
)
turn(text="Done: every tool was exercised.")


def main():
    out = sys.argv[1]
    # The sub-agent's turns answer the sub-agent, whose first request carries
    # no tool results; every other turn follows the previous turn's calls.
    sub_first = next(i for i, t in enumerate(_turns) if any(c["name"] == "task" for c in t["tool_calls"])) + 1
    lines = [
        json.dumps(
            {
                "deepbox_replay": 1,
                "scripted": True,
                "model": "anthropic:claude-sonnet-4-6",
                "description": "deepagents differential test (tests/conformance/conversation.py)",
            }
        )
    ]
    prev_ids = None
    main_prev = None
    for i, t in enumerate(_turns):
        request = {}
        if i == sub_first:
            main_prev, prev_ids = prev_ids, None
        elif i == sub_first + 2:
            prev_ids = main_prev
        if prev_ids:
            request["tool_results"] = prev_ids
        resp = {"text": t["text"], "tool_calls": t["tool_calls"]}
        lines.append(json.dumps({"request": request, "response": resp}))
        prev_ids = [c["id"] for c in t["tool_calls"]]
    with open(out, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    with open(out + ".differences.json", "w", encoding="utf-8") as f:
        json.dump(DELIBERATE, f, indent=1)
    calls = sum(len(t["tool_calls"]) for t in _turns)
    print(f"{out}: {len(_turns)} turns, {calls} tool calls", file=sys.stderr)


if __name__ == "__main__":
    main()
