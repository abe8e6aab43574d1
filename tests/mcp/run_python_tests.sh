#!/usr/bin/env bash
# Runs a pytest file of tests/mcp in a venv of pinned dependencies:
#   run_python_tests.sh BUILD_DIR VENV_NAME REQUIREMENTS PYTEST_ARGS...
# The venv is BUILD_DIR/VENV_NAME, rebuilt when REQUIREMENTS changes. Exit 77
# (ctest: skipped) with a clear message when PyPI cannot be reached to build it.
set -euo pipefail
build=$(cd "$1" && pwd)
venv="$build/$2"
req=$3
shift 3
here="$(cd "$(dirname "$0")" && pwd)"
py=${PYTHON:-python3}
if ! "$py" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "SKIPPED: $py is missing or older than 3.11 (deepagents and mcp need 3.11)"
  exit 77
fi
stamp=$(sha256sum "$req" | cut -d' ' -f1)
if [[ ! -x "$venv/bin/python" || "$(cat "$venv/.requirements-sha256" 2>/dev/null)" != "$stamp" ]]; then
  # One bounded probe of PyPI through pip itself (its index, proxy and certificates).
  probe=$(mktemp -d)
  trap 'rm -rf "$probe"' EXIT
  if ! timeout 120 "$py" -m pip download --no-deps --disable-pip-version-check -q \
        --dest "$probe" iniconfig==2.3.1 >"$probe/log" 2>&1; then
    echo "SKIPPED: PyPI cannot be reached, so the pinned Python dependencies of this test"
    echo "($(basename "$req")) cannot be installed (pip: $(tail -1 "$probe/log"))"
    exit 77
  fi
  rm -rf "$venv"
  "$py" -m venv "$venv"
  "$venv/bin/pip" install --disable-pip-version-check -q -r "$req"
  echo "$stamp" >"$venv/.requirements-sha256"
fi
export DEEPBOX_BIN_DIR="$build/bin"
export PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}"
cd "$here"
exec "$venv/bin/python" -m pytest -p no:cacheprovider -rfEs -x "$@"
