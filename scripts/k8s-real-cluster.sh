#!/usr/bin/env bash
# A real Kubernetes control plane on this machine for the k8s-real tests
# (tests/k8s/real/README.md): etcd, kube-apiserver and kube-controller-manager
# (garbage collector, namespace and serviceaccount controllers only) from
# scripts/k8s-control-plane-build.sh, the agent-sandbox CRDs generated from
# tests/k8s/crds/, and deepbox-k8s-test-agent (our test controller as a real
# API client, a node agent that runs each pod as a deepbox local sandbox on a
# loopback address, and a sandbox router). Everything listens on 127.0.0.1.
#
#   scripts/k8s-real-cluster.sh up DIR BUILD_DIR   start; writes DIR/env (KUBECONFIG=...)
#   scripts/k8s-real-cluster.sh down DIR [BUILD_DIR] stop everything started by `up`
#   scripts/k8s-real-cluster.sh restart-apiserver|stop-apiserver|start-apiserver DIR
#   scripts/k8s-real-cluster.sh compact DIR        compact etcd at its current revision
# Environment: DEEPBOX_K8S_BIN (the control plane's bin directory; default:
# what k8s-control-plane-build.sh prints); DEEPBOX_K8S_CRDS, DEEPBOX_K8S_AGENT_ARGS
# (scripts/k8s-real-conformance.sh: upstream's CRDs, our agent as the node only).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cmd=${1:-}
dir=${2:-}
log() { echo "k8s-real-cluster: $*" >&2; }
[[ -n $cmd && -n $dir ]] || { log "usage: $0 up|down|restart-apiserver|stop-apiserver|start-apiserver|compact DIR [BUILD_DIR]"; exit 2; }

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# Waits until `$@` succeeds (bounded: 120 s), else fails naming what.
wait_for() {
  local what=$1
  shift
  for _ in $(seq 1 600); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.2
  done
  log "timed out waiting for $what"
  return 1
}

start_bg() {  # start_bg NAME CMD... : runs CMD in the background, pid in DIR/NAME.pid
  local name=$1
  shift
  "$@" >"$dir/$name.log" 2>&1 &
  echo $! >"$dir/$name.pid"
}

stop_pid() {  # stop_pid NAME: SIGTERM, then SIGKILL after 10 s, the process of DIR/NAME.pid
  local f=$dir/$1.pid pid
  [[ -f $f ]] || return 0
  pid=$(cat "$f")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$f"
}

start_apiserver() {
  # shellcheck disable=SC1091
  source "$dir/ports"
  start_bg apiserver "$bin/kube-apiserver" \
    --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
    --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$API_PORT" \
    --tls-cert-file="$dir/pki/apiserver.crt" --tls-private-key-file="$dir/pki/apiserver.key" \
    --client-ca-file="$dir/pki/ca.crt" \
    --service-account-issuer=https://kubernetes.default.svc \
    --service-account-key-file="$dir/pki/sa.pub" \
    --service-account-signing-key-file="$dir/pki/sa.key" \
    --api-audiences=https://kubernetes.default.svc \
    --authorization-mode=RBAC --service-cluster-ip-range=10.96.0.0/24 \
    --endpoint-reconciler-type=none --profiling=false --enable-priority-and-fairness=false \
    --watch-cache=false
  wait_for "kube-apiserver /readyz" curl -sf --cacert "$dir/pki/ca.crt" \
    --cert "$dir/pki/admin.crt" --key "$dir/pki/admin.key" "https://127.0.0.1:$API_PORT/readyz"
}

kubeconfig() {  # kubeconfig FILE CERT KEY
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: real
  cluster:
    server: https://127.0.0.1:$API_PORT
    certificate-authority: $dir/pki/ca.crt
users:
- name: user
  user:
    client-certificate: $2
    client-key: $3
contexts:
- name: real
  context: {cluster: real, user: user, namespace: default}
current-context: real
EOF
}

case $cmd in
up)
  build=${3:?up needs the build directory (bin/deepbox, bin/deepbox-k8s-test-agent)}
  build=$(cd "$build" && pwd)
  bin=${DEEPBOX_K8S_BIN:-$("$root/scripts/k8s-control-plane-build.sh")}
  for b in etcd kube-apiserver kube-controller-manager kubectl; do
    [[ -x $bin/$b ]] || { log "$bin/$b is missing"; exit 1; }
  done
  rm -rf "$dir"
  mkdir -p "$dir/pki" "$dir/crds"
  echo "$bin" >"$dir/bin"
  {
    echo "ETCD_PORT=$(free_port)"
    echo "ETCD_PEER_PORT=$(free_port)"
    echo "API_PORT=$(free_port)"
  } >"$dir/ports"
  # shellcheck disable=SC1091
  source "$dir/ports"

  # Certificates: a CA, the API server's (127.0.0.1), clients (admin in
  # system:masters, also used by kube-controller-manager and the test agent),
  # and the service-account signing key.
  pki=$dir/pki
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=deepbox-test-ca \
    -keyout "$pki/ca.key" -out "$pki/ca.crt" 2>/dev/null
  sign() {  # sign NAME SUBJECT [EXT]
    openssl req -newkey rsa:2048 -nodes -subj "$2" -keyout "$pki/$1.key" -out "$pki/$1.csr" 2>/dev/null
    if [[ -n ${3:-} ]]; then
      printf '%s\n' "$3" >"$pki/$1.ext"
      openssl x509 -req -in "$pki/$1.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
        -days 2 -extfile "$pki/$1.ext" -out "$pki/$1.crt" 2>/dev/null
    else
      openssl x509 -req -in "$pki/$1.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
        -days 2 -out "$pki/$1.crt" 2>/dev/null
    fi
  }
  sign apiserver /CN=kube-apiserver "subjectAltName=IP:127.0.0.1,DNS:localhost"
  sign admin "/O=system:masters/CN=deepbox-test-admin"
  openssl genrsa -out "$pki/sa.key" 2048 2>/dev/null
  openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null

  start_bg etcd "$bin/etcd" --data-dir "$dir/etcd-data" --name default \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "default=http://127.0.0.1:$ETCD_PEER_PORT" \
    --log-level warn --unsafe-no-fsync
  wait_for "etcd" curl -sf "http://127.0.0.1:$ETCD_PORT/health"
  start_apiserver
  kubeconfig "$dir/admin.kubeconfig" "$pki/admin.crt" "$pki/admin.key"
  kubectl=("$bin/kubectl" --kubeconfig "$dir/admin.kubeconfig")

  # The CRDs: the structural schema facts of tests/k8s/crds/ made whole
  # (singular/list names and the status subresource the controllers use).
  python3 - "$root/tests/k8s/crds" "$dir/crds" <<'PY'
import json, os, sys
src, dst = sys.argv[1], sys.argv[2]
for f in sorted(os.listdir(src)):
    if not f.endswith(".schema.yaml"):
        continue
    with open(os.path.join(src, f)) as fh:
        lines = [l for l in fh if l.strip() and not l.startswith("#")]
    crd = json.loads("".join(lines))
    names = crd["spec"]["names"]
    names.setdefault("singular", names["kind"].lower())
    names.setdefault("listKind", names["kind"] + "List")
    for v in crd["spec"]["versions"]:
        v.setdefault("subresources", {"status": {}})
    # The facts keep x-kubernetes-list-type but not the map keys, which the
    # API server requires for list-type map: the pod spec's keys (as in
    # core/v1), else the list is made atomic (only server-side apply merging
    # differs).
    keys = {"containers": ["name"], "initContainers": ["name"], "ephemeralContainers": ["name"],
            "ports": ["containerPort", "protocol"], "env": ["name"], "volumeMounts": ["mountPath"],
            "volumeDevices": ["devicePath"], "claims": ["name"], "volumes": ["name"],
            "imagePullSecrets": ["name"], "schedulingGates": ["name"], "hostAliases": ["ip"],
            "resourceClaims": ["name"],
            "topologySpreadConstraints": ["topologyKey", "whenUnsatisfiable"]}
    def fix(node, name=None):
        if isinstance(node, dict):
            if node.get("x-kubernetes-list-type") == "map" and not node.get("x-kubernetes-list-map-keys"):
                if name in keys:
                    node["x-kubernetes-list-map-keys"] = keys[name]
                else:
                    node["x-kubernetes-list-type"] = "atomic"
            for k, v in node.items():
                if k == "properties" and isinstance(v, dict):
                    for pk, pv in v.items():
                        fix(pv, pk)
                else:
                    fix(v, name if k == "items" else None)
        elif isinstance(node, list):
            for v in node:
                fix(v, name)
    fix(crd)
    with open(os.path.join(dst, f.replace(".schema.yaml", ".json")), "w") as out:
        json.dump(crd, out)
PY
  # (DEEPBOX_K8S_CRDS: upstream's own CRD files instead, for the conformance run.)
  if [[ -n ${DEEPBOX_K8S_CRDS:-} ]]; then
    rm -f "$dir"/crds/*.json
    cp "$DEEPBOX_K8S_CRDS"/*.yaml "$dir/crds/"
  fi
  "${kubectl[@]}" apply --server-side -f "$dir/crds" >/dev/null
  "${kubectl[@]}" wait --for condition=established --timeout=60s --all crd >/dev/null

  # Garbage collection (ownerReferences: claim -> Sandbox -> pod), namespaces
  # and their default service accounts; started after the CRDs exist.
  start_bg controller-manager "$bin/kube-controller-manager" \
    --kubeconfig "$dir/admin.kubeconfig" \
    --controllers=garbagecollector,namespace,serviceaccount \
    --bind-address=127.0.0.1 --secure-port=0 --leader-elect=false \
    --use-service-account-credentials=false
  wait_for "the default service account" "${kubectl[@]}" get serviceaccount default -n default

  # Our controller, node agent and router. The pods' sandboxes live in a
  # short directory (their daemons' unix socket paths must fit 107 bytes).
  state=$(mktemp -d /tmp/deepbox-k8s-real.XXXXXX)
  echo "$state" >"$dir/state_dir"
  start_bg agent "$build/bin/deepbox-k8s-test-agent" --kubeconfig "$dir/admin.kubeconfig" \
    --deepbox "$build/bin/deepbox" --router-port-file "$dir/router.port" \
    --state-dir "$state" ${DEEPBOX_K8S_AGENT_ARGS:-}
  if [[ ${DEEPBOX_K8S_AGENT_ARGS:-} != *--node-only* ]]; then
    wait_for "deepbox-k8s-test-agent's router" test -s "$dir/router.port"
  else
    echo 0 >"$dir/router.port"
  fi
  {
    echo "KUBECONFIG=$dir/admin.kubeconfig"
    echo "DEEPBOX_K8S_REAL_DIR=$dir"
    echo "DEEPBOX_K8S_REAL_BIN=$bin"
    echo "AGENT_SANDBOX_ROUTER_URL=http://127.0.0.1:$(cat "$dir/router.port")"
    echo "API_PORT=$API_PORT"
    echo "ETCD_PORT=$ETCD_PORT"
  } >"$dir/env"
  log "up: $dir/env"
  ;;
down)
  for p in agent controller-manager apiserver etcd; do stop_pid "$p"; done
  if [[ -f $dir/state_dir ]]; then
    state=$(cat "$dir/state_dir")
    # Sandboxes the agent could not delete (it was killed): their own CLI
    # removes them; then the directory.
    if [[ -x ${3:-}/bin/deepbox ]]; then
      DEEPBOX_STATE_DIR=$state "$3/bin/deepbox" sandbox rm --selector deepbox.dev/k8s-pod \
        >/dev/null 2>&1 || true
    fi
    [[ $state == /tmp/deepbox-k8s-real.* ]] && rm -rf "$state"
    rm -f "$dir/state_dir"
  fi
  ;;
restart-apiserver)
  bin=$(cat "$dir/bin")
  stop_pid apiserver
  start_apiserver
  ;;
stop-apiserver)
  stop_pid apiserver
  ;;
start-apiserver)
  bin=$(cat "$dir/bin")
  start_apiserver
  ;;
compact)
  # shellcheck disable=SC1091
  source "$dir/ports"
  rev=$(curl -sf -X POST -d '{"key":"AA=="}' "http://127.0.0.1:$ETCD_PORT/v3/kv/range" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["header"]["revision"])')
  curl -sf -X POST -d "{\"revision\":\"$rev\",\"physical\":true}" \
    "http://127.0.0.1:$ETCD_PORT/v3/kv/compaction" >/dev/null
  echo "$rev"
  ;;
*)
  log "unknown command $cmd"
  exit 2
  ;;
esac
