"""Compares the two sides of the deepagents differential test.

    python3 compare.py DEEPAGENTS.json DEEPBOX.json DIFFERENCES.json

Every tool the model is offered (name, description, argument schema) and
every tool result must be identical, byte for byte, except the deliberate
differences listed below, which src/agent/README.md documents for users.
Exit 0 when nothing else differs; 1 with a report otherwise.
"""

import ast
import json
import sys

# Tool call id -> (how it may differ, why), from conversation.py: the
# deliberate differences of src/agent/README.md.
#   "set":  an ls result: the same paths, in another order (deepbox sorts by
#           name; deepagents lists in directory order).
#   "any":  the result differs as the README says.
DELIBERATE = {}


def _ls_paths(text):
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return None
    return sorted(value) if isinstance(value, list) else None


def load(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def compare_tools(ref, box, problems):
    ref_tools = {t["name"]: t for t in ref["tools"]}
    box_tools = {t["name"]: t for t in box["tools"]}
    if sorted(ref_tools) != sorted(box_tools):
        problems.append(f"offered tools differ: deepagents {sorted(ref_tools)}, deepbox {sorted(box_tools)}")
    for name in sorted(set(ref_tools) & set(box_tools)):
        r, b = ref_tools[name], box_tools[name]
        if r["description"] != b["description"]:
            problems.append(f"tool {name}: description differs\n--- deepagents\n{r['description']}\n--- deepbox\n{b['description']}")
        if r["parameters"] != b["parameters"]:
            problems.append(
                f"tool {name}: argument schema differs\n--- deepagents\n{json.dumps(r['parameters'], indent=1, sort_keys=True)}"
                f"\n--- deepbox\n{json.dumps(b['parameters'], indent=1, sort_keys=True)}"
            )


def compare_results(ref, box, problems, notes):
    ref_by_id = {r["tool_call_id"]: r for r in ref["results"]}
    box_by_id = {r["tool_call_id"]: r for r in box["results"]}
    if sorted(ref_by_id) != sorted(box_by_id):
        problems.append(f"tool calls differ: only deepagents {sorted(set(ref_by_id) - set(box_by_id))}, "
                        f"only deepbox {sorted(set(box_by_id) - set(ref_by_id))}")
    same = 0
    for call_id in sorted(set(ref_by_id) & set(box_by_id)):
        r, b = ref_by_id[call_id], box_by_id[call_id]
        if r["content"] == b["content"] and r["status"] == b["status"]:
            same += 1
            if call_id in DELIBERATE and DELIBERATE[call_id][0] == "any":
                notes.append(f"{call_id} ({r['name']}): documented as different, but identical now")
            continue
        kind, reason = DELIBERATE.get(call_id, (None, None))
        if kind == "set" and _ls_paths(r["content"]) is not None and _ls_paths(r["content"]) == _ls_paths(b["content"]):
            same += 1
            continue
        if kind == "any":
            notes.append(f"{call_id} ({r['name']}): deliberate difference: {reason}")
            continue
        problems.append(
            f"{call_id} ({r['name']}): result differs (status {r['status']} vs {b['status']})\n"
            f"--- deepagents\n{r['content'][:3000]}\n--- deepbox\n{b['content'][:3000]}"
        )
    return same, len(ref_by_id)


def main():
    ref, box = load(sys.argv[1]), load(sys.argv[2])
    DELIBERATE.update({k: tuple(v) for k, v in load(sys.argv[3]).items()})
    problems, notes = [], []
    compare_tools(ref, box, problems)
    same, total = compare_results(ref, box, problems, notes)
    for n in notes:
        print("note:", n)
    for p in problems:
        print("DIFFERENCE:", p, end="\n\n")
    print(f"deepagents {ref.get('deepagents')}: {same}/{total} tool results identical, "
          f"{len(problems)} unexplained difference(s), {len(notes)} note(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
