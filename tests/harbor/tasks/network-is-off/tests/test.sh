#!/bin/bash
# The environment, not the solution, is under test: the connection must fail.
python3 -c 'import socket; socket.create_connection(("1.1.1.1", 443), timeout=5)' 2>/dev/null && { echo 0 > /logs/verifier/reward.txt; exit 0; }
[ "$(cat /app/network.txt)" = blocked ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt
