#!/usr/bin/env bash
# The k8s-real tests (tests/k8s/real/README.md): builds (or reuses) the real
# control plane, starts it with scripts/k8s-real-cluster.sh, runs the tests
# labelled k8s-real against it, and stops it. Called by scripts/test.sh.
#   scripts/k8s-real-test.sh [BUILD_DIR]         (default build/dev)
#   SKIP_K8S_REAL=1                              skip, with a message
# Cost on 2 cores: the Go build of the control plane ~15 min when its cache
# (outside the clone, see k8s-control-plane-build.sh) is cold, ~0 warm; the
# tests themselves a few minutes.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build/dev}
build=$(cd "$build" && pwd)
if [[ "${SKIP_K8S_REAL:-0}" == 1 ]]; then
  echo "k8s-real: SKIPPED (SKIP_K8S_REAL=1): the Kubernetes tests against a real API server" \
    "did not run; unset SKIP_K8S_REAL to run them" >&2
  exit 0
fi
start=$SECONDS
log=$build/k8s-real-build.log
echo "k8s-real: building the control plane (cached; log: $log)" >&2
if ! bin=$("$root/scripts/k8s-control-plane-build.sh" 2>"$log"); then
  tail -20 "$log" >&2
  echo "k8s-real: FAILED to build the control plane (set SKIP_K8S_REAL=1 to skip these tests)" >&2
  exit 1
fi
echo "k8s-real: control plane ready in $((SECONDS - start)) s: $bin" >&2
dir=$build/k8s-real
cleanup() { "$root/scripts/k8s-real-cluster.sh" down "$dir" "$build" || true; }
trap cleanup EXIT
up=$SECONDS
DEEPBOX_K8S_BIN=$bin "$root/scripts/k8s-real-cluster.sh" up "$dir" "$build"
echo "k8s-real: cluster up in $((SECONDS - up)) s" >&2
tests=$SECONDS
# One at a time: the tests share one API server and one node.
DEEPBOX_K8S_REAL_DIR=$dir ctest --test-dir "$build" -L k8s-real --output-on-failure -j1
echo "k8s-real: tests took $((SECONDS - tests)) s; whole step $((SECONDS - start)) s" >&2
