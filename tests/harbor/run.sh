#!/usr/bin/env bash
# Harbor (Terminal-Bench's harness, PyPI harbor, pinned in
# python/requirements-harbor.txt) runs its oracle agent over tests/harbor/tasks
# with deepbox.harbor:DeepboxEnvironment: every reference solution must pass
# inside a deepbox sandbox and every deliberately broken one must fail
# (check_results.py). Called by python/run-tests.sh:
#   tests/harbor/run.sh BUILD_DIR [SUMMARY_JSON]
# Makes BUILD_DIR/python-harbor-venv (Harbor needs Python >= 3.12: $PYTHON_HARBOR,
# else python3.13/python3.12 on PATH, else pyenv's). Skips (exit 0, with a
# message) when no such Python exists or PyPI cannot be reached.
#   HARBOR_SETUP_ONLY=1  only make the venv
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
build=$(cd "${1:?usage: run.sh BUILD_DIR [SUMMARY_JSON]}" && pwd)
summary=${2:-}

find_python() {
  local c
  for c in "${PYTHON_HARBOR:-}" python3.13 python3.12 "$HOME"/.pyenv/versions/3.13*/bin/python3 \
           "$HOME"/.pyenv/versions/3.12*/bin/python3 python3; do
    [[ -n "$c" ]] || continue
    c=$(command -v "$c" 2>/dev/null) || continue
    if "$c" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then
      echo "$c"
      return 0
    fi
  done
  return 1
}
if ! py=$(find_python); then
  echo "harbor: SKIPPED: no Python >= 3.12 (Harbor needs it; set PYTHON_HARBOR)"
  exit 0
fi

venv="$build/python-harbor-venv"
req="$repo/python/requirements-harbor.txt"
stamp=$(sha256sum "$req" | cut -d' ' -f1)
if [[ ! -x "$venv/bin/harbor" || "$(cat "$venv/.requirements-sha256" 2>/dev/null)" != "$stamp" ]]; then
  rm -rf "$venv"
  "$py" -m venv "$venv"
  if ! "$venv/bin/pip" install --disable-pip-version-check -q -r "$req" >"$venv.log" 2>&1; then
    tail -5 "$venv.log"
    echo "harbor: SKIPPED: cannot install python/requirements-harbor.txt from PyPI"
    rm -rf "$venv"
    exit 0
  fi
  echo "$stamp" >"$venv/.requirements-sha256"
fi
"$venv/bin/pip" install --disable-pip-version-check -q --no-deps --force-reinstall "$repo/python"
if [[ "${HARBOR_SETUP_ONLY:-0}" == 1 ]]; then
  echo "harbor: venv ready ($venv)"
  exit 0
fi

export DEEPBOX_BIN="${DEEPBOX_BIN:-$build/bin/deepbox}"
export DEEPBOX_SANDBOXD="${DEEPBOX_SANDBOXD:-$build/bin/deepbox-sandboxd}"
# Sandboxes of this run only; nothing outlives it.
state=$(mktemp -d "${TMPDIR:-/tmp}/deepbox-harbor-state-XXXXXX")
jobs=$(mktemp -d "${TMPDIR:-/tmp}/deepbox-harbor-jobs-XXXXXX")
export DEEPBOX_STATE_DIR="$state"
cleanup() {
  "$DEEPBOX_BIN" sandbox rm --selector harbor.deepbox/session >/dev/null 2>&1 || true
  rm -rf "$state" "$jobs"
}
trap cleanup EXIT
# LiteLLM (a Harbor dependency) would fetch its model price list from GitHub.
export LITELLM_LOCAL_MODEL_COST_MAP=True
# Harbor's run is the test; its own failure (not a task's) fails this step too.
set +e
(cd "$jobs" && timeout 900 "$venv/bin/harbor" run --path "$here/tasks" --agent oracle \
  --env deepbox.harbor:DeepboxEnvironment --n-concurrent 2 --jobs-dir "$jobs" --job-name oracle \
  --yes --quiet) >"$jobs/harbor.log" 2>&1
rc=$?
set -e
sed -n '/Trials/,/Results written/p' "$jobs/harbor.log"
if [[ $rc != 0 ]]; then
  tail -40 "$jobs/harbor.log"
  echo "harbor: FAILED: harbor run exited $rc"
  exit 1
fi
"$venv/bin/python" "$here/check_results.py" "$here/tasks" "$jobs/oracle" $summary
