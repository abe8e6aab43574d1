#!/usr/bin/env bash
# Builds the real Kubernetes control plane the k8s-real tests run against
# (tests/k8s/README.md): kube-apiserver, kube-controller-manager and kubectl
# v1.36.3, and etcd v3.6.8, from the Go module proxy, into a cache directory
# outside the clone keyed by version. A complete cache is reused as is.
#   scripts/k8s-control-plane-build.sh        prints the bin directory
# Environment:
#   DEEPBOX_K8S_CACHE   cache root (default ${XDG_CACHE_HOME:-$HOME/.cache}/deepbox/k8s)
# Needs Go >= 1.26 (k8s.io/kubernetes v1.36 requires it). Cold: ~15 min on
# an idle 2-core machine (etcd 107 s, kube-apiserver 449 s, then
# kube-controller-manager 102 s and kubectl 36 s, plus downloads); 30 min
# (etcd 245 s, the three together 1569 s) on the same machine at load
# average 16. ~0.9-1.2 GB of modules, ~3-4 GB of Go build cache under the
# cache root.
set -euo pipefail

K8S_VERSION=v1.36.3
K8S_STAGING_VERSION=v0.36.3
ETCD_VERSION=v3.6.8

cache_root=${DEEPBOX_K8S_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/deepbox/k8s}
out=$cache_root/k8s-$K8S_VERSION-etcd-$ETCD_VERSION
bin=$out/bin
log() { echo "k8s-control-plane-build: $*" >&2; }

if [[ -f $out/complete ]]; then
  echo "$bin"
  exit 0
fi

if ! command -v go >/dev/null 2>&1; then
  log "go is not installed (Go >= 1.26 is needed to build the control plane)"
  exit 2
fi
go_version=$(go env GOVERSION)   # e.g. go1.26.8
if [[ ! $go_version =~ ^go([0-9]+)\.([0-9]+) ]]; then
  log "cannot read the Go version ('$go_version'); Go >= 1.26 is needed"
  exit 2
fi
if (( BASH_REMATCH[1] < 1 || (BASH_REMATCH[1] == 1 && BASH_REMATCH[2] < 26) )); then
  log "$go_version is too old: k8s.io/kubernetes $K8S_VERSION needs Go >= 1.26"
  exit 2
fi

mkdir -p "$cache_root"
# One build at a time per cache root (two test runs may start together).
exec 9>"$cache_root/.lock"
flock 9
if [[ -f $out/complete ]]; then
  echo "$bin"
  exit 0
fi

export GOMODCACHE=$cache_root/go/mod
export GOCACHE=$cache_root/go/build
export GOFLAGS=-mod=mod
export CGO_ENABLED=0
export GOTOOLCHAIN=local
export GOWORK=off
work=$out/work
rm -rf "$work"
mkdir -p "$work/kubernetes" "$work/etcd" "$work/out" "$bin"

timed() {  # timed NAME CMD... : runs CMD, logs its duration
  local name=$1 start=$SECONDS
  shift
  "$@"
  log "$name built in $((SECONDS - start)) s"
}

# etcd: its server module is a main package ("etcd") whose own go.mod uses
# replace directives, so it is built from a wrapper module, not `go install`.
build_start=$SECONDS
cd "$work/etcd"
cat >go.mod <<MOD
module deepbox.local/etcdbuild

go 1.26

require go.etcd.io/etcd/server/v3 $ETCD_VERSION
MOD
timed etcd go build -p 2 -trimpath -ldflags "-s -w" -o "$bin/etcd.tmp" go.etcd.io/etcd/server/v3
mv "$bin/etcd.tmp" "$bin/etcd"

# Kubernetes: a wrapper module requiring k8s.io/kubernetes and replacing each
# staging module (required there as v0.0.0 and replaced by a local path) by its
# published version. The list is read from k8s.io/kubernetes's own go.mod.
cd "$work/kubernetes"
k8s_mod=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" |
  sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
if [[ -z $k8s_mod || ! -f $k8s_mod ]]; then
  log "could not download k8s.io/kubernetes@$K8S_VERSION's go.mod from the module proxy"
  exit 1
fi
staging=$(sed -n 's#^[[:space:]]*\(k8s\.io/[A-Za-z0-9._-]*\) => \./staging/src/.*#\1#p' "$k8s_mod")
if [[ -z $staging ]]; then
  log "no staging modules found in $k8s_mod"
  exit 1
fi
{
  echo "module deepbox.local/k8sbuild"
  echo
  echo "go 1.26"
  echo
  echo "require k8s.io/kubernetes $K8S_VERSION"
  echo
  for m in $staging; do echo "replace $m => $m $K8S_STAGING_VERSION"; done
} >go.mod
log "$(echo "$staging" | wc -l) staging modules replaced by $K8S_STAGING_VERSION"
minor=${K8S_VERSION#v1.}
minor=${minor%%.*}
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
  ldflags+=" -X $pkg.gitTreeState=clean"
done
# One `go build` for the three: one action graph, so their shared packages
# compile once and the links run side by side. -p 2: CI has 2 cores.
timed "kube-apiserver, kube-controller-manager and kubectl" go build -p 2 -trimpath \
  -ldflags "$ldflags" -o "$work/out/" k8s.io/kubernetes/cmd/kube-apiserver \
  k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kubectl
for cmd in kube-apiserver kube-controller-manager kubectl; do mv "$work/out/$cmd" "$bin/$cmd"; done

rm -rf "$work"
touch "$out/complete"
log "done in $((SECONDS - build_start)) s: $bin"
echo "$bin"
