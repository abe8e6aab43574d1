#!/usr/bin/env bash
# Builds deepbox with the `dev` preset (Debug + ASan/UBSan, -Werror) and runs
# every test with CTest. This is the README's test command and what CI runs.
#   scripts/test.sh            install deps (if root), configure, build, test
#   SKIP_DEPS=1 scripts/test.sh   skip the apt step
#   SKIP_FORMAT=1 scripts/test.sh skip the clang-format check (scripts/check-format.sh)
#   SKIP_PYTHON=1 scripts/test.sh skip the Python package tests (python/run-tests.sh)
#   SKIP_RELEASE=1 scripts/test.sh skip compiling the release build (ci-release preset)
#   SKIP_FUZZ=1 scripts/test.sh   skip the fuzz run (scripts/fuzz.sh; FUZZ_SECONDS per target)
#   SKIP_K8S_REAL=1 scripts/test.sh skip the tests against a real Kubernetes API
#                                   server (scripts/k8s-real-test.sh)
set -euo pipefail
cd "$(dirname "$0")/.."

# Sets cpu_seconds to the CPU time used so far by this script's finished
# children: bash's `times`, run in this shell (in a subshell, as $(...) would
# make it, it reports that subshell's own: zero), read back through a file.
cpu_seconds=0
read_children_cpu() {
  local file shell_line child_line
  file=$(mktemp)
  times >"$file"
  { read -r shell_line; read -r child_line; } <"$file"
  rm -f "$file"
  # child_line: "XmY.YYYs XmY.YYYs" (user, system)
  cpu_seconds=$(echo "$child_line" | awk '{ t = 0; for (i = 1; i <= 2; i++) {
    split($i, a, "m"); sub("s", "", a[2]); t += a[1] * 60 + a[2] } printf "%d", t }')
}
# Runs one step and says on stderr what it cost, so a CI log shows where its
# minutes go (the background control-plane build is counted where it is waited for).
# The steps' costs, for the summary printed at the end (each step's share of
# the CPU time and of the wall time).
step_names=()
step_walls=()
step_cpus=()
step() {
  local name=$1 t0=$SECONDS c0
  shift
  local rc=0
  read_children_cpu
  c0=$cpu_seconds
  "$@" || rc=$?
  read_children_cpu
  echo "== step '$name': $((SECONDS - t0)) s wall, $((cpu_seconds - c0)) s CPU" \
    "(total so far: $SECONDS s)$( ((rc == 0)) || echo ": FAILED (exit $rc)")" >&2
  step_names+=("$name$( ((rc == 0)) || echo " (FAILED)")")
  step_walls+=($((SECONDS - t0)))
  step_cpus+=($((cpu_seconds - c0)))
  return "$rc"  # a failed step ends the script (set -e), after its line
}
print_summary() {
  local i cpu_total=0
  ((${#step_names[@]} > 0)) || return 0
  for i in "${!step_cpus[@]}"; do cpu_total=$((cpu_total + step_cpus[i])); done
  echo "== cost per step (wall s, CPU s, share of CPU):" >&2
  for i in "${!step_names[@]}"; do
    printf '   %6d %7d %5s%%  %s\n' "${step_walls[i]}" "${step_cpus[i]}" \
      "$(awk -v c="${step_cpus[i]}" -v t="$cpu_total" 'BEGIN { printf "%.1f", t ? 100 * c / t : 0 }')" \
      "${step_names[i]}" >&2
  done
  printf '   %6d %7d  100%%  total\n' "$SECONDS" "$cpu_total" >&2
}
if [[ "${SKIP_DEPS:-0}" != 1 ]]; then
  step "install deps" ./scripts/install-deps.sh
fi
# The k8s-real step's control plane (scripts/k8s-control-plane-build.sh: Go,
# from the module proxy, cached outside the clone): cold it is ~1.2 GB of
# downloads and ~12 min of compiling on 2 cores, so it starts now, at idle CPU
# priority (SCHED_IDLE): its downloads overlap the C++ build and its compiles
# use the CPU time the build and the tests leave idle. The k8s-real step
# waits for it. Its own process group, ended if this script stops early.
k8s_build_pid=
stop_k8s_build() {
  if [[ -n $k8s_build_pid ]] && kill -0 "$k8s_build_pid" 2>/dev/null; then
    kill -TERM -- "-$k8s_build_pid" 2>/dev/null || true
  fi
}
on_exit() {
  stop_k8s_build
  print_summary
}
trap on_exit EXIT
if [[ "${SKIP_K8S_REAL:-0}" != 1 ]]; then
  mkdir -p build
  idle=(chrt --idle 0)
  "${idle[@]}" true 2>/dev/null || idle=()  # (a kernel without SCHED_IDLE: nice only)
  setsid "${idle[@]}" nice -n 19 ./scripts/k8s-control-plane-build.sh \
    >/dev/null 2>build/k8s-control-plane-build.log &
  k8s_build_pid=$!
fi
if [[ "${SKIP_FORMAT:-0}" != 1 ]]; then
  step "format check" ./scripts/check-format.sh
fi
step "dev configure" cmake --preset dev
step "dev build" cmake --build --preset dev
# The suite runs two tests at a time; sandbox tests need root (CI is root).
# The k8s-real tests need the real control plane: their own step below.
step "dev tests" ctest --preset dev -LE k8s-real "$@"
# The release build (ci-release preset) with -Werror, because GCC warns
# differently at -O3: what ships (deepbox, deepbox-sandboxd, their libraries,
# the example), the benchmarks and the check of the release binaries'
# hardening (FORTIFY_SOURCE is release-only). The test suite is not compiled
# again at -O3: it was compiled and run above in the sanitizer build (with it
# the step had 445 build steps instead of about 200; fuzz/README.md "Cost in CI").
if [[ "${SKIP_RELEASE:-0}" != 1 ]]; then
  step "release configure" cmake --preset ci-release
  step "release build" cmake --build --preset ci-release
  step "hardening test" ctest --test-dir build/ci-release -R '^hardening_test\.' --output-on-failure
fi
# Every fuzz target for a fixed time (16 targets, 2 at a time: about 4.5 minutes
# at 30 s) after compiling the fuzz preset (clang, 155 objects; see
# fuzz/README.md "Cost in CI"); a crash, leak, sanitizer report or violated
# property fails.
if [[ "${SKIP_FUZZ:-0}" != 1 ]]; then
  step "fuzz (build + run)" ./scripts/fuzz.sh "${FUZZ_SECONDS:-30}"
fi
# The Python package (python/README.md): pinned dependencies from PyPI into
# build/dev/python-venv, then pytest on real sandboxes (skipped with a message
# when PyPI is unreachable). SKIP_PYTHON=1 skips it.
if [[ "${SKIP_PYTHON:-0}" != 1 ]]; then
  step "python package" ./python/run-tests.sh build/dev
fi
# Against a real kube-apiserver + etcd + kube-controller-manager
# (tests/k8s/real/README.md). Cost: ~1-2 min (9 tests 46-78 s, cluster up
# 10-22 s, measured on a loaded 2-core machine), plus whatever of the control
# plane's build is not done by now (cold: up to ~15 min of 2 cores; cached: 0).
wait_for_control_plane() {
  if ! wait "$k8s_build_pid"; then
    cat build/k8s-control-plane-build.log >&2
    echo "k8s-real: FAILED to build the control plane (log above); SKIP_K8S_REAL=1 skips" \
      "this step" >&2
    exit 1
  fi
  k8s_build_pid=
}
if [[ -n $k8s_build_pid ]]; then
  step "k8s control plane (rest of its build; its CPU all of it)" wait_for_control_plane
fi
step "k8s-real tests" ./scripts/k8s-real-test.sh build/dev  # (says so when skipped)
