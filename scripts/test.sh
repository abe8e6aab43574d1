#!/usr/bin/env bash
# Builds deepbox with the `dev` preset (Debug + ASan/UBSan, -Werror) and runs
# every test with CTest. This is the README's test command and what CI runs.
#   scripts/test.sh            install deps (if root), configure, build, test
#   SKIP_DEPS=1 scripts/test.sh   skip the apt step
#   SKIP_FORMAT=1 scripts/test.sh skip the clang-format check (scripts/check-format.sh)
#   SKIP_PYTHON=1 scripts/test.sh skip the Python package tests (python/run-tests.sh,
#                                   with the Harbor oracle run and the README's
#                                   "Verified by" check; SKIP_HARBOR=1: Harbor only)
#   SKIP_RELEASE=1 scripts/test.sh skip compiling the release build (ci-release preset)
#   SKIP_FUZZ=1 scripts/test.sh   skip the fuzz run (scripts/fuzz.sh; FUZZ_SECONDS per target)
#   SKIP_MCP_CONFORMANCE=1 scripts/test.sh skip the MCP conformance suite
#                                   (scripts/mcp-conformance.sh)
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
# Work that does not have to wait for anything runs in the background, in a
# session of its own at a low CPU priority, so that it only takes the CPU the
# foreground steps leave idle (the tests wait on sandboxes and timeouts and use
# about one core of two). With the kernel's autogroup scheduling (each session
# is one scheduling group, and `nice` only orders processes within a group) the
# priority is the session's autogroup nice value; without it, plain nice.
#   start_background NICE LOG CMD...   sets background_pid
background_pids=()
start_background() {
  local nice=$1 log=$2
  shift 2
  # A background child of this (non-interactive) shell is no process-group
  # leader, so setsid(1) calls setsid() itself: $! is the session's leader and
  # its process group, which stop_background ends as a whole.
  setsid bash -c 'echo "$0" >/proc/self/autogroup 2>/dev/null || true; exec nice -n "$0" "$@"' \
    "$nice" "$@" >"$log" 2>&1 </dev/null &
  background_pid=$!
  background_pids+=("$background_pid")
}
stop_background() {
  local pid
  for pid in "${background_pids[@]}"; do
    kill -0 "$pid" 2>/dev/null && kill -TERM -- "-$pid" 2>/dev/null || true
  done
}
# wait_background PID LOG WHAT: waits for a background job; on failure shows
# its log and stops the script.
wait_background() {
  local pid=$1 log=$2 what=$3 rc=0 i
  wait "$pid" || rc=$?
  for i in "${!background_pids[@]}"; do  # waited for: its pid may be reused
    [[ ${background_pids[i]} != "$pid" ]] || unset "background_pids[i]"
  done
  if ((rc != 0)); then
    tail -40 "$log" >&2
    echo "$what FAILED (the last lines of $log are above)" >&2
    return 1
  fi
}
on_exit() {
  stop_background
  print_summary
}
trap on_exit EXIT
mkdir -p build
# The k8s-real step's control plane (scripts/k8s-control-plane-build.sh: Go,
# from the module proxy, cached outside the clone): cold it is ~1 GB of
# downloads and ~800 CPU-seconds of compiling, so it starts first, at a low
# priority: its downloads overlap the C++ build and its compiles use the CPU
# the other steps leave idle. The k8s-real step, which comes before the fuzz
# run (whose targets use both cores for a fixed time), waits for it.
k8s_build_pid=
if [[ "${SKIP_K8S_REAL:-0}" != 1 ]]; then
  start_background 10 build/k8s-control-plane-build.log ./scripts/k8s-control-plane-build.sh
  k8s_build_pid=$background_pid
fi
if [[ "${SKIP_FORMAT:-0}" != 1 ]]; then
  step "format check" ./scripts/check-format.sh
fi
step "dev configure" cmake --preset dev
# The Python step's venvs (pinned packages from PyPI: downloads, mostly) are
# made in the background meanwhile.
venvs_pid=
if [[ "${SKIP_PYTHON:-0}" != 1 ]]; then
  start_background 10 build/python-venvs.log env PYTHON_SETUP_ONLY=1 ./python/run-tests.sh build/dev
  venvs_pid=$background_pid
fi
step "dev build" cmake --build --preset dev
# The other two builds run in the background while the dev tests, the Python
# tests and the k8s-real tests run (at a priority below the control plane's,
# which is needed first, and the tests'):
# - the release build (ci-release preset) with -Werror, because GCC warns
#   differently at -O3: what ships (deepbox, deepbox-sandboxd, their
#   libraries, the example), the benchmarks and the check of the release
#   binaries' hardening (FORTIFY_SOURCE is release-only). The test suite is not
#   compiled again at -O3: it is compiled and run in the sanitizer build;
# - the fuzz targets (the fuzz preset: clang, ASan/UBSan, libFuzzer).
# Their cost is printed where they are waited for (fuzz/README.md "Cost in CI").
builds=()
if [[ "${SKIP_RELEASE:-0}" != 1 ]]; then
  builds+=("cmake --preset ci-release && cmake --build --preset ci-release")
fi
if [[ "${SKIP_FUZZ:-0}" != 1 ]]; then
  builds+=("cmake --preset fuzz && cmake --build --preset fuzz")
fi
builds_pid=
if ((${#builds[@]} > 0)); then
  joined=$(printf ' && %s' "${builds[@]}")
  start_background 15 build/release-and-fuzz-build.log bash -c "set -x${joined}"
  builds_pid=$background_pid
fi
# The suite runs two tests at a time; sandbox tests need root (CI is root).
# The k8s-real tests need the real control plane: their own step below.
step "dev tests" ctest --preset dev -LE k8s-real "$@"
# The Python package (python/README.md): pinned dependencies from PyPI into
# build/dev/python-venv, then pytest on real sandboxes (skipped with a message
# when PyPI is unreachable), then Harbor's oracle agent over tests/harbor/tasks
# (~1 min) and the check of README.md's "Verified by" table against the
# results. SKIP_PYTHON=1 skips it.
if [[ "${SKIP_PYTHON:-0}" != 1 ]]; then
  step "python venvs (the rest; their CPU all of it)" \
    wait_background "$venvs_pid" build/python-venvs.log "making the Python venvs"
  step "python package" ./python/run-tests.sh build/dev
fi
# The official MCP conformance suite's server scenarios against `deepbox
# mcp`, with the baseline of tests/mcp-conformance (~25 s; npm packages
# cached outside the clone). SKIP_MCP_CONFORMANCE=1 skips it.
step "mcp conformance" ./scripts/mcp-conformance.sh build/dev  # (says so when skipped)
# Against a real kube-apiserver + etcd + kube-controller-manager
# (tests/k8s/real/README.md). Cost: ~1-2 min (9 tests 46-78 s, cluster up
# 10-22 s, measured on a loaded 2-core machine), plus whatever of the control
# plane's build is not done by now (cold: up to ~15 min of 2 cores; cached: 0).
if [[ -n $k8s_build_pid ]]; then
  step "k8s control plane (the rest of its build; its CPU all of it)" \
    wait_background "$k8s_build_pid" build/k8s-control-plane-build.log \
    "k8s-real: building the control plane (SKIP_K8S_REAL=1 skips this step)"
fi
step "k8s-real tests" ./scripts/k8s-real-test.sh build/dev  # (says so when skipped)
if [[ -n $builds_pid ]]; then
  step "release and fuzz builds (the rest; their CPU all of it)" \
    wait_background "$builds_pid" build/release-and-fuzz-build.log "the release and fuzz builds"
fi
if [[ "${SKIP_RELEASE:-0}" != 1 ]]; then
  step "hardening test" ctest --test-dir build/ci-release -R '^hardening_test\.' \
    --no-tests=error --output-on-failure
  # ...and at work: the example, a cp round trip, the daemon's integration tests.
  step "release binaries" ./scripts/release-smoke.sh build/ci-release build/dev
fi
# Every fuzz target for a fixed time (18 targets, 2 at a time: about 4.5
# minutes at 30 s); a crash, leak, sanitizer report or violated property fails.
if [[ "${SKIP_FUZZ:-0}" != 1 ]]; then
  step "fuzz run" env FUZZ_SKIP_BUILD=1 ./scripts/fuzz.sh "${FUZZ_SECONDS:-30}"
fi
