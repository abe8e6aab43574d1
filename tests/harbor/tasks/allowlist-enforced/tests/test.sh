#!/bin/bash
# The environment is under test, without a packet leaving this machine: no
# route out (a UDP connect() only looks it up), a proxy in the environment,
# and that proxy refusing a tunnel to an address not on the allowlist (a
# loopback one); and the solution saw the same.
ok=1
python3 -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).connect(("192.0.2.1", 9))' 2>/dev/null && ok=0
proxy=${HTTPS_PROXY:-${https_proxy:-}}
[ -n "$proxy" ] || ok=0
python3 -c 'import http.client, sys, urllib.parse
u = urllib.parse.urlsplit(sys.argv[1])
c = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=10)
c.set_tunnel("127.0.0.1", 9)
c.connect()' "$proxy" 2>/dev/null && ok=0
[ "$(cat /app/egress.txt 2>/dev/null)" = blocked ] || ok=0
echo $ok > /logs/verifier/reward.txt
