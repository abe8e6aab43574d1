#!/usr/bin/env bash
# Opt-in: the k8s-real tests with the UPSTREAM agent-sandbox controller and Go
# sandbox router in place of ours (tests/k8s/real/README.md). Needs a
# kubernetes-sigs/agent-sandbox checkout (its module is not on the Go module
# proxy, so CI cannot fetch it):
#   AGENT_SANDBOX_SRC=/path/to/agent-sandbox scripts/k8s-real-conformance.sh [BUILD_DIR]
# Without AGENT_SANDBOX_SRC it says so and exits 0. Everything binds 127.0.0.1:
# the controller runs with --enable-webhook=false (its webhook has no bind
# address flag and would listen on every interface) and its metrics/probes
# off; the router with --allow-loopback-pod-ip (our pods are on 127.0.0.N);
# deepbox always sends X-Sandbox-Pod-IP, so the router never falls back to a
# DNS lookup. Our node agent still plays kubelet (and scheduler).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-build/dev}" && pwd)
log() { echo "k8s-real-conformance: $*" >&2; }
if [[ -z ${AGENT_SANDBOX_SRC:-} ]]; then
  log "SKIPPED: set AGENT_SANDBOX_SRC to a kubernetes-sigs/agent-sandbox checkout to run the" \
    "k8s-real tests against the upstream controller and Go router"
  exit 0
fi
src=$(cd "$AGENT_SANDBOX_SRC" && pwd)
rev=$(git -C "$src" rev-parse --short HEAD 2>/dev/null || echo unknown)
cache=${DEEPBOX_K8S_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/deepbox/k8s}/agent-sandbox-$rev
mkdir -p "$cache"
if [[ ! -x $cache/agent-sandbox-controller || ! -x $cache/sandbox-router ]]; then
  log "building the upstream controller and router at $rev"
  (cd "$src" && CGO_ENABLED=0 GOWORK=off go build -trimpath -o "$cache/agent-sandbox-controller" \
    ./cmd/agent-sandbox-controller && CGO_ENABLED=0 GOWORK=off go build -trimpath \
    -o "$cache/sandbox-router" ./sandbox-router/cmd)
fi
bin=$("$root/scripts/k8s-control-plane-build.sh")
dir=$build/k8s-conformance
"$root/scripts/k8s-real-cluster.sh" down "$dir" "$build" 2>/dev/null || true
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  "$root/scripts/k8s-real-cluster.sh" down "$dir" "$build" || true
}
trap cleanup EXIT
# Our cluster script with the upstream pieces instead of ours: its CRDs, its
# controller, its router; our agent only as the node.
DEEPBOX_K8S_BIN=$bin DEEPBOX_K8S_CRDS=$src/k8s/crds DEEPBOX_K8S_AGENT_ARGS=--node-only \
  "$root/scripts/k8s-real-cluster.sh" up "$dir" "$build"
# shellcheck disable=SC1091
source "$dir/env"
"$cache/agent-sandbox-controller" --kubeconfig "$KUBECONFIG" --extensions --leader-elect=false \
  --enable-webhook=false --manage-webhook-certs=false --metrics-bind-address=0 \
  --health-probe-bind-address=0 >"$dir/upstream-controller.log" 2>&1 &
pids+=($!)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
KUBECONFIG=$KUBECONFIG "$cache/sandbox-router" --http-bind-address "127.0.0.1:$port" \
  --https-bind-address "" --metrics-bind-address "127.0.0.1:0" \
  --health-probe-bind-address "127.0.0.1:0" --allow-loopback-pod-ip >"$dir/upstream-router.log" 2>&1 &
pids+=($!)
sed -i "s|^AGENT_SANDBOX_ROUTER_URL=.*|AGENT_SANDBOX_ROUTER_URL=http://127.0.0.1:$port|" "$dir/env"
for _ in $(seq 1 300); do
  curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break
  sleep 0.2
done
DEEPBOX_K8S_REAL_DIR=$dir ctest --test-dir "$build" -L k8s-real --output-on-failure -j1
