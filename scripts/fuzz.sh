#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ (the `fuzz` preset: clang-14,
# ASan/UBSan) and runs each one for a fixed time over its committed corpus
# and dictionary. A crash, a leak, a sanitizer report, a violated property or
# a timeout fails the script; the input is saved under build/fuzz/artifacts/.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET]      default 30
#   FUZZ_JOBS=N         targets run N at a time (default: the number of cores)
#   FUZZ_TARGETS="a b"  only these targets (names as in fuzz/corpus/)
#   FUZZ_BUILD_DIR=DIR  build directory (default build/fuzz, the preset's)
#   FUZZ_ARGS="..."     more libFuzzer flags for every target
#   FUZZ_SKIP_BUILD=1   run what is built (while another build goes on)
#   FUZZ_EXCLUDE="a b"  not these targets (open findings, fuzz/README.md)
#
# New inputs each run finds are kept in $FUZZ_BUILD_DIR/corpus/<target> (not
# committed); a crash input worth keeping goes to fuzz/corpus/<target>/ as a
# regression case (fuzz/README.md).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-30}
[[ "$seconds" =~ ^[0-9]+$ ]] || { echo "usage: $0 [SECONDS_PER_TARGET]" >&2; exit 2; }
build=${FUZZ_BUILD_DIR:-build/fuzz}
jobs=${FUZZ_JOBS:-$(nproc)}

if [[ "${FUZZ_SKIP_BUILD:-0}" == 1 ]]; then
  :
elif [[ "$build" == build/fuzz ]]; then
  cmake --preset fuzz >/dev/null
  cmake --build --preset fuzz
else
  cmake --build "$build" --target fuzz_targets -j "$jobs"
fi

# Every corpus has its target: one that was not built is an error.
targets=()
for t in ${FUZZ_TARGETS:-$(ls fuzz/corpus)}; do
  if [[ " ${FUZZ_EXCLUDE:-} " == *" $t "* ]]; then
    echo "$t: excluded (FUZZ_EXCLUDE)"
  elif [[ -x "$build/bin/${t}_fuzz" ]]; then
    targets+=("$t")
  else
    echo "$t: $build/bin/${t}_fuzz was not built" >&2
    exit 1
  fi
done
mkdir -p "$build/artifacts" "$build/logs"
run_one() {
  local t=$1
  local bin="$build/bin/${t}_fuzz"
  mkdir -p "$build/corpus/$t" "$build/tmp/$t"
  local dict=()
  [[ -f "fuzz/dict/$t.dict" ]] && dict=(-dict="fuzz/dict/$t.dict")
  # Each target's temporary trees live in its own TMPDIR, removed afterwards
  # even when the target crashed.
  local rc=0
  # shellcheck disable=SC2086
  TMPDIR="$PWD/$build/tmp/$t" "$bin" -max_total_time="$seconds" -timeout=60 -rss_limit_mb=2560 \
    -print_final_stats=1 -artifact_prefix="$build/artifacts/$t-" "${dict[@]}" ${FUZZ_ARGS:-} \
    "$build/corpus/$t" "fuzz/corpus/$t" >"$build/logs/$t.log" 2>&1 || rc=$?
  rm -rf "${build:?}/tmp/$t"
  return $rc
}

failed=()
declare -A running=()  # pid -> target
reap() {
  local pid rc=0
  wait -n -p pid || rc=$?
  (( rc == 0 )) || failed+=("${running[$pid]}")
  unset "running[$pid]"
}
for t in "${targets[@]}"; do
  while (( ${#running[@]} >= jobs )); do reap; done
  run_one "$t" &
  running[$!]=$t
done
while (( ${#running[@]} > 0 )); do reap; done

printf '%-18s %12s %8s %8s %8s\n' target executions exec/s cov corpus
for t in "${targets[@]}"; do
  log="$build/logs/$t.log"
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  cov=$(grep -Eo 'cov: [0-9]+' "$log" | tail -1 | cut -d' ' -f2)
  corp=$(grep -Eo 'corp: [0-9]+' "$log" | tail -1 | cut -d' ' -f2)
  printf '%-18s %12s %8s %8s %8s\n' "$t" "${execs:-?}" "${rate:-?}" "${cov:-?}" "${corp:-?}"
done
if (( ${#failed[@]} )); then
  for t in "${failed[@]}"; do
    echo "== $t FAILED; the end of $build/logs/$t.log:" >&2
    tail -40 "$build/logs/$t.log" >&2
  done
  echo "fuzzing found problems in: ${failed[*]} (inputs in $build/artifacts/)" >&2
  exit 1
fi
echo "every target ran ${seconds}s without a finding"
