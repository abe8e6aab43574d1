#!/usr/bin/env bash
# The deepagents differential test: the same scripted conversation
# (conversation.py, > 60 tool calls) replayed through the pinned deepagents
# release (deepagents_reference.py) and through deepbox's agent
# (deepagents_diff_deepbox), each with its tools in the same real local
# deepbox sandbox, one after the other; compare.py then requires every tool
# description, argument schema and tool result to be identical except the
# deliberate differences it lists (src/agent/README.md).
#
# Usage: run_deepagents_diff.sh BUILD_DIR
# Exit 77 (skip) only when PyPI cannot be reached to install the pinned
# deepagents, or when this host cannot create local sandboxes.
#
# Version bump: change deepagents in requirements.txt (and re-pin its
# dependencies: pip install deepagents==NEW in a fresh venv, pip freeze),
# run this test, fix or document each difference it reports.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="$(cd "${1:?usage: run_deepagents_diff.sh BUILD_DIR}" && pwd)"
bin="$build/bin"
req="$here/requirements.txt"
version="$(sed -n 's/^deepagents==//p' "$req")"
venv="$build/deepagents-venv-$version"

for b in deepbox deepbox-sandboxd deepagents_diff_deepbox; do
  [[ -x "$bin/$b" ]] || { echo "missing $bin/$b: build it first" >&2; exit 2; }
done

# ---------------------------------------------------------------- the venv
stamp="$venv/.requirements"
if ! cmp -s "$req" "$stamp" 2>/dev/null; then
  echo "installing the pinned deepagents $version into $venv ..." >&2
  rm -rf "$venv"
  python3 -m venv "$venv"
  if ! "$venv/bin/pip" install -q --disable-pip-version-check -r "$req" >"$venv.log" 2>&1; then
    if ! "$venv/bin/python" -c 'import urllib.request; urllib.request.urlopen("https://pypi.org/simple/pip/", timeout=15)' \
        >/dev/null 2>&1; then
      echo "SKIP: PyPI (https://pypi.org) cannot be reached, so the pinned deepagents $version cannot be installed" >&2
      rm -rf "$venv"
      exit 77
    fi
    cat "$venv.log" >&2
    echo "FAIL: pip could not install the pinned requirements ($req) although PyPI answers" >&2
    exit 1
  fi
  cp "$req" "$stamp"
fi

# ---------------------------------------------------------------- the sandbox
work="$(mktemp -d /tmp/dbx-dadiff-XXXXXX)"
export DEEPBOX_STATE_DIR="$work/state"
id=""
cleanup() {
  if [[ -n "$id" ]]; then "$bin/deepbox" sandbox rm "$id" >/dev/null 2>&1 || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
if ! meta="$("$bin/deepbox" sandbox create --cold --ttl 1800 --network none --json 2>"$work/create.err")"; then
  rc=$?
  cat "$work/create.err" >&2
  if [[ $rc -eq 4 ]]; then
    echo "SKIP: this host cannot create local sandboxes (see deepbox doctor)" >&2
    exit 77
  fi
  exit 1
fi
id="$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["id"])' "$meta")"
socket="$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["socket"])' "$meta")"

python3 "$here/conversation.py" "$work/conversation.jsonl"
task="$(python3 -c 'import sys; sys.path.insert(0, sys.argv[1]); import conversation; print(conversation.TASK)' "$here")"

reset() {  # the conversation rebuilds its fixture; results of the last run go
  "$bin/deepbox" sandbox exec "$id" -- sh -c \
    'rm -rf /workspace/proj /workspace/large_tool_results /workspace/conversation_history /tmp/conformance' >/dev/null
}

reset
echo "== deepagents $version" >&2
"$venv/bin/python" "$here/deepagents_reference.py" --endpoint "unix:$socket" \
  --replay "$work/conversation.jsonl" --task "$task" --out "$work/deepagents.json"
reset
echo "== deepbox" >&2
"$bin/deepagents_diff_deepbox" --endpoint "unix:$socket" \
  --replay "$work/conversation.jsonl" --task "$task" --out "$work/deepbox.json"

if [[ -n "${DEEPAGENTS_DIFF_KEEP:-}" ]]; then
  cp "$work/deepagents.json" "$work/deepbox.json" "$DEEPAGENTS_DIFF_KEEP"/
fi
python3 "$here/compare.py" "$work/deepagents.json" "$work/deepbox.json" \
  "$work/conversation.jsonl.differences.json"
