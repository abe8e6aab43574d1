#!/usr/bin/env bash
# Benchmark harness: one scripted Fibonacci run through deepbox (bench_agent)
# and the same scripted conversation through Python deepagents
# (fib_deepagents.py), both with their tools running in a real local deepbox
# sandbox, in one invocation; prints both and the ratio python / deepbox.
# See ../README.md.
#
# Usage: compare_deepagents.sh [BUILD_DIR] [RUNS]
#   BUILD_DIR  a build with bench_agent, deepbox and deepbox-sandboxd in bin/
#              (default: build/release; benchmarks need a release build)
#   RUNS       timed runs on each side (default 50; 2 warm-up runs each)
# Environment:
#   DEEPAGENTS_VERSION   deepagents release to install (default 0.7.8, with the
#                        pinned requirements.txt; another version is installed
#                        with whatever pip resolves for it)
#   DEEPBOX_BENCH_VENV   the virtualenv (default BUILD_DIR/deepagents-venv-VERSION)
# Exit 77 when deepagents cannot be installed (no PyPI access).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
build="$(cd "${1:-$repo/build/release}" 2>/dev/null && pwd || echo "${1:-$repo/build/release}")"
runs="${2:-50}"
bin="$build/bin"
replay="$repo/examples/fib/fib.replay.jsonl"

for b in bench_agent deepbox deepbox-sandboxd; do
  if [[ ! -x "$bin/$b" ]]; then
    echo "missing $bin/$b; build it first:" >&2
    echo "  cmake --preset release && cmake --build build/release --target bench_agent deepbox deepbox-sandboxd" >&2
    exit 2
  fi
done

version="${DEEPAGENTS_VERSION:-0.7.8}"
venv="${DEEPBOX_BENCH_VENV:-$build/deepagents-venv-$version}"
case "$venv" in
  "$repo"/build/*) ;;
  "$repo"/*) echo "refusing to create a virtualenv inside the source tree: $venv" >&2; exit 2 ;;
esac
if ! "$venv/bin/python" -c "import deepagents" 2>/dev/null; then
  echo "Installing deepagents==$version into $venv ..." >&2
  python3 -m venv "$venv" || { echo "SKIP: cannot create a virtualenv" >&2; exit 77; }
  if [[ "$version" == "0.7.8" ]]; then
    req=(-r "$here/requirements.txt")
  else
    req=("deepagents==$version")
  fi
  if ! "$venv/bin/pip" install -q --disable-pip-version-check "${req[@]}" >"$venv.log" 2>&1; then
    cat "$venv.log" >&2
    echo "SKIP: cannot install deepagents==$version from PyPI" >&2
    exit 77
  fi
fi
installed="$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("deepagents"))')"
if [[ "$installed" != "$version" ]]; then
  echo "warning: $venv has deepagents $installed, not $version" >&2
fi

# A real local sandbox for the Python side, in a private state dir; its
# daemon's unix socket is the backend's endpoint. Deleted on every exit path.
state="$(mktemp -d /tmp/dbx-abench-cmp-XXXXXX)"
id=""
cleanup() {
  if [[ -n "$id" ]]; then
    DEEPBOX_STATE_DIR="$state" "$bin/deepbox" sandbox rm "$id" >/dev/null 2>&1 || true
  fi
  rm -rf "$state"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
meta="$(DEEPBOX_STATE_DIR="$state" "$bin/deepbox" sandbox create --cold --ttl 3600 --network none --json)"
id="$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["id"])' "$meta")"
socket="$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["socket"])' "$meta")"

load_before="$(cat /proc/loadavg)"
echo "== deepbox: bench_agent --sections fib --fib-runs $runs"
cpp_out="$("$bin/bench_agent" --sections fib --fib-runs "$runs" --replay "$replay")" ||
  { echo "$cpp_out"; echo "bench_agent failed" >&2; exit 1; }
echo "$cpp_out"
echo
echo "== Python deepagents $installed: fib_deepagents.py --runs $runs (sandbox $id)"
py_out="$(env -u LANGSMITH_TRACING -u LANGCHAIN_TRACING_V2 -u LANGSMITH_API_KEY -u LANGCHAIN_API_KEY \
  "$venv/bin/python" "$here/fib_deepagents.py" --socket "$socket" --replay "$replay" --runs "$runs")" ||
  { echo "$py_out"; echo "fib_deepagents.py failed" >&2; exit 1; }
echo "$py_out"
load_after="$(cat /proc/loadavg)"

cpp_line="$(grep '^BENCH_AGENT_FIB ' <<<"$cpp_out")"
py_line="$(grep '^DEEPAGENTS_FIB ' <<<"$py_out")"
field() { sed -n "s/.* $2=\([^ ]*\).*/\1/p" <<<" $1"; }
row() {
  local name="$1" key="$2" c p
  c="$(field "$cpp_line" "$key")"
  p="$(field "$py_line" "$key")"
  awk -v n="$name" -v c="$c" -v p="$p" \
    'BEGIN { printf "  %-44s %10.3f %12.3f %9.1fx\n", n, c, p, (c > 0 ? p / c : 0) }'
}
echo
echo "== Scripted Fibonacci run: deepbox vs Python deepagents $installed ($runs runs each, same sandbox kind)"
printf "  %-44s %10s %12s %10s\n" "per run, ms" "deepbox" "deepagents" "py/deepbox"
row "run: harness + tools, p50" run_p50_ms
row "run: harness + tools, mean" run_mean_ms
row "  tools (sandbox calls), p50" tools_p50_ms
row "  harness only, p50" harness_p50_ms
row "  scripted model, p50" model_p50_ms
row "create agent, p50" create_p50_ms
row "create + run + release, p50" total_p50_ms
echo "  Python imports (once per process): $(field "$py_line" import_ms) ms"
echo "  verified fib.py in the sandbox: deepbox $(field "$cpp_line" verified), deepagents $(field "$py_line" verified)"
echo "  loadavg before: $load_before"
echo "  loadavg after:  $load_after"
