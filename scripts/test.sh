#!/usr/bin/env bash
# Builds deepbox with the `dev` preset (Debug + ASan/UBSan, -Werror) and runs
# every test with CTest. This is the README's test command and what CI runs.
#   scripts/test.sh            install deps (if root), configure, build, test
#   SKIP_DEPS=1 scripts/test.sh   skip the apt step
#   SKIP_FORMAT=1 scripts/test.sh skip the clang-format check (scripts/check-format.sh)
#   SKIP_PYTHON=1 scripts/test.sh skip the Python package tests (python/run-tests.sh)
#   SKIP_RELEASE=1 scripts/test.sh skip compiling the release build (ci-release preset)
#   SKIP_FUZZ=1 scripts/test.sh   skip the fuzz run (scripts/fuzz.sh; FUZZ_SECONDS per target)
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ "${SKIP_DEPS:-0}" != 1 ]]; then
  ./scripts/install-deps.sh
fi
if [[ "${SKIP_FORMAT:-0}" != 1 ]]; then
  ./scripts/check-format.sh
fi
cmake --preset dev
cmake --build --preset dev
# The suite runs two tests at a time; sandbox tests need root (CI is root).
ctest --preset dev "$@"
# Every target of the release build, compiled with -Werror (GCC warns
# differently at -O3); its tests ran above in the sanitizer build, except the
# check of the release binaries' hardening (FORTIFY_SOURCE is release-only).
# Cost: about 10 min on 2 cores (277 objects at ~3.8 CPU-s each, measured
# from a random sample; fuzz/README.md "Cost in CI").
if [[ "${SKIP_RELEASE:-0}" != 1 ]]; then
  cmake --preset ci-release
  cmake --build --preset ci-release
  ctest --test-dir build/ci-release -R '^hardening_test\.' --output-on-failure
fi
# Every fuzz target for a fixed time (15 targets, 2 at a time: about 4 minutes
# at 30 s) after compiling the fuzz preset (clang, 155 objects; see
# fuzz/README.md "Cost in CI"); a crash, leak, sanitizer report or violated
# property fails.
if [[ "${SKIP_FUZZ:-0}" != 1 ]]; then
  # kubeconfig is left out until its open finding is fixed (yaml-cpp 0.7's
  # LoadAll never returns on fuzz/open/kubeconfig-yaml-cpp-hang; fuzz/README.md).
  FUZZ_EXCLUDE="${FUZZ_EXCLUDE-kubeconfig}" ./scripts/fuzz.sh "${FUZZ_SECONDS:-30}"
fi
# The Python package (python/README.md): pinned dependencies from PyPI into
# build/dev/python-venv, then pytest on real sandboxes (skipped with a message
# when PyPI is unreachable). SKIP_PYTHON=1 skips it.
if [[ "${SKIP_PYTHON:-0}" != 1 ]]; then
  ./python/run-tests.sh build/dev
fi
