#!/usr/bin/env bash
# Tests of the Python package (python/), run by scripts/test.sh after CTest:
#   python/run-tests.sh [BUILD_DIR] [PYTEST_ARGS...]     (default build/dev)
# Creates BUILD_DIR/python-venv with the pinned dependencies of
# python/requirements-test.txt (from PyPI), installs the package, and runs
# pytest on real sandboxes made by BUILD_DIR/bin/deepbox (test_k8s.py also
# starts BUILD_DIR/bin/deepbox-fake-cluster, a fake Kubernetes cluster on
# 127.0.0.1, and skips with a message when it is not built). The dcode test gets
# its own venv (BUILD_DIR/python-dcode-venv, python/requirements-dcode.txt):
# deepagents-code pins another deepagents. When PyPI cannot be reached the
# step is skipped with a message (exit 0). pytest's "no tests ran" (5) is not
# a failure.
# Then Harbor's oracle agent runs over tests/harbor/tasks in deepbox sandboxes
# (tests/harbor/run.sh, its own venv BUILD_DIR/python-harbor-venv on Python
# >= 3.12; ~1 min with the venv made, ~4 min more to make it), and, on a full
# run (no PYTEST_ARGS), python/verified_by.py checks README.md's "Verified by"
# table against this run's results (BUILD_DIR/python-results: pytest's JUnit
# XML and Harbor's counts).
#   PYTHON_SETUP_ONLY=1   only make the venvs (scripts/test.sh does it in the
#                         background while the C++ tests run)
#   SKIP_HARBOR=1         skip the Harbor run
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/dev}
shift || true
build=$(cd "$build" && pwd)
py=${PYTHON:-python3}

if ! "$py" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "python tests: SKIPPED: $py is missing or older than 3.11 (deepagents needs 3.11)"
  exit 0
fi

# One bounded probe of PyPI through pip itself (its index, proxy and certificates).
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
if ! timeout 120 "$py" -m pip download --no-deps --disable-pip-version-check -q \
      --dest "$probe" iniconfig==2.3.1 >"$probe/log" 2>&1; then
  echo "python tests: SKIPPED: PyPI cannot be reached, so the pinned dependencies cannot be"
  echo "installed (pip: $(tail -1 "$probe/log"))"
  exit 0
fi

# A venv is reused while its requirements file is unchanged.
make_venv() {  # DIR REQUIREMENTS
  local dir=$1 req=$2 stamp
  stamp=$(sha256sum "$req" | cut -d' ' -f1)
  if [[ ! -x "$dir/bin/python" || "$(cat "$dir/.requirements-sha256" 2>/dev/null)" != "$stamp" ]]; then
    rm -rf "$dir"
    "$py" -m venv "$dir"
    "$dir/bin/pip" install --disable-pip-version-check -q -r "$req"
    echo "$stamp" >"$dir/.requirements-sha256"
  fi
  # The package itself, always fresh (no dependencies of its own).
  "$dir/bin/pip" install --disable-pip-version-check -q --no-deps --force-reinstall ./python
}

venv="$build/python-venv"
make_venv "$venv" python/requirements-test.txt
if [[ "${SKIP_DCODE:-0}" != 1 ]]; then
  make_venv "$build/python-dcode-venv" python/requirements-dcode.txt
  export DCODE_VENV="$build/python-dcode-venv"
fi

if [[ "${PYTHON_SETUP_ONLY:-0}" == 1 ]]; then
  if [[ "${SKIP_HARBOR:-0}" != 1 ]]; then
    HARBOR_SETUP_ONLY=1 tests/harbor/run.sh "$build"
  fi
  echo "python tests: venvs ready (PYTHON_SETUP_ONLY=1: no tests run)"
  exit 0
fi

export DEEPBOX_BUILD_DIR="$build"
results="$build/python-results"
rm -rf "$results"
mkdir -p "$results"
set +e
"$venv/bin/python" -m pytest python/tests -p no:cacheprovider -W ignore::pytest.PytestRemovedIn10Warning \
  -rfEs --junitxml="$results/pytest.xml" "$@"
rc=$?
set -e
if [[ $rc == 5 ]]; then
  echo "python tests: pytest collected no tests"
  rc=0
fi
if [[ "${SKIP_HARBOR:-0}" != 1 ]]; then
  tests/harbor/run.sh "$build" "$results/harbor.json" || rc=1
else
  echo "harbor: SKIPPED (SKIP_HARBOR=1)"
fi
if [[ $# == 0 ]]; then
  "$venv/bin/python" python/verified_by.py "$results" || rc=1
fi
exit $rc
