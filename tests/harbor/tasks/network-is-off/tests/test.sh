#!/bin/bash
# The environment, not the solution, is under test: no route out may exist.
# Asked without a packet (a UDP connect() only looks the route up): a test
# never sends traffic off this machine, not even to see it blocked.
routed() {
  python3 -c 'import socket,sys
s = socket.socket(socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET, socket.SOCK_DGRAM)
s.connect((sys.argv[1], 9))' "$1" 2>/dev/null
}
if routed 192.0.2.1 || routed 2001:db8::1; then echo 0; elif [ "$(cat /app/network.txt 2>/dev/null)" = blocked ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
