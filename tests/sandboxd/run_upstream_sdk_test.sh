#!/usr/bin/env bash
# Drives deepbox-sandboxd with the upstream Python SDK's own HTTP client code
# (PyPI k8s-agent-sandbox), as far as it runs without a cluster.
# Usage: run_upstream_sdk_test.sh SANDBOXD_BINARY VENV_DIR
# Exit 77 (ctest: skipped) when the SDK cannot be installed (no PyPI access).
set -euo pipefail
bin="$1"
venv="$2"
here="$(cd "$(dirname "$0")" && pwd)"
if [[ ! -x "$venv/bin/python" ]] || ! "$venv/bin/python" -c "import k8s_agent_sandbox" 2>/dev/null; then
  python3 -m venv "$venv" || { echo "SKIP: cannot create a virtualenv"; exit 77; }
  if ! "$venv/bin/pip" install -q --disable-pip-version-check "k8s-agent-sandbox==1.0.8" >"$venv.log" 2>&1; then
    cat "$venv.log"; echo "SKIP: cannot install k8s-agent-sandbox from PyPI"; exit 77
  fi
fi
work="$(mktemp -d)"
trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -rf "$work"' EXIT
mkdir -p "$work/root"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$bin" --listen "127.0.0.1:$port" --root-dir "$work/root" &
pid=$!
for _ in $(seq 1 300); do
  if python3 -c "import socket,sys; socket.create_connection(('127.0.0.1',$port),0.2)" 2>/dev/null; then break; fi
  sleep 0.05
done
"$venv/bin/python" "$here/upstream_sdk_test.py" "http://127.0.0.1:$port" "$work/root"
