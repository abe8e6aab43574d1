#!/bin/bash
# The environment is under test: a host outside the allowlist is refused by
# the proxy (no connection leaves the sandbox for it), a direct connection
# that skips the proxy fails, and the solution saw the refusal.
ok=1
python3 -c 'import urllib.request; urllib.request.urlopen("https://example.com/", timeout=10)' 2>/dev/null && ok=0
python3 -c 'import socket; socket.create_connection(("1.1.1.1", 443), timeout=5)' 2>/dev/null && ok=0
[ -n "${HTTPS_PROXY:-${https_proxy:-}}" ] || ok=0
[ "$(cat /app/egress.txt 2>/dev/null)" = blocked ] || ok=0
echo $ok > /logs/verifier/reward.txt
