#!/usr/bin/env bash
# A client command for the conformance suite's auth scenarios
# (scripts/mcp-conformance.sh): `deepbox mcp login URL` as a user runs it,
# with curl in the browser's place (it opens the printed authorization URL
# and follows the redirect to deepbox's loopback listener), or, for the
# client credentials scenarios, `deepbox mcp login --client-credentials`
# (no browser). The tokens go to a file of their own; pre-registered
# credentials (a secret or a private key) come from the scenario's
# MCP_CONFORMANCE_CONTEXT.
#   login-with-curl.sh DEEPBOX_BINARY URL
set -euo pipefail
deepbox=$1
url=${*: -1}
work=$(mktemp -d /tmp/deepbox-mcp-login.XXXXXX)
trap 'rm -rf "$work"' EXIT
export DEEPBOX_MCP_OAUTH_FILE=$work/oauth.json
args=()
context() {  # KEY: the scenario context's value of KEY ("" when absent)
  python3 -c 'import json,os,sys; print(json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}").get(sys.argv[1],""))' "$1"
}
client_id=$(context client_id)
if [[ -n $client_id ]]; then
  args+=(--client-id "$client_id")
  # Secrets and keys reach deepbox as files, as a user gives them.
  if [[ -n $(context private_key_pem) ]]; then
    context private_key_pem >"$work/key.pem"
    args+=(--private-key-file "$work/key.pem")
  else
    context client_secret >"$work/secret"
    args+=(--client-secret-file "$work/secret")
  fi
fi
# The machine-to-machine scenarios: no browser at all.
[[ ${MCP_CONFORMANCE_SCENARIO:-} == auth/client-credentials-* ]] && args+=(--client-credentials)
"$deepbox" mcp login "${args[@]}" "$url" 2>"$work/login.err" &
pid=$!
authorize=
for _ in $(seq 1 100); do
  authorize=$(grep -o 'https\?://[^ ]*?response_type=code[^ ]*' "$work/login.err" | head -1 || true)
  [[ -n $authorize ]] && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
[[ -n $authorize ]] && curl -s -L -o /dev/null "$authorize"
rc=0
wait "$pid" || rc=$?
cat "$work/login.err" >&2
# The tokens' file must be private.
if ((rc == 0)) && [[ $(stat -c %a "$DEEPBOX_MCP_OAUTH_FILE") != 600 ]]; then
  echo "login-with-curl: $DEEPBOX_MCP_OAUTH_FILE is not mode 0600" >&2
  rc=1
fi
exit $rc
