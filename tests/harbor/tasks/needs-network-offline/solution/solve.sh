#!/bin/bash
# A solution that needs the network. It looks the route up first (a UDP
# connect() sends nothing) and gives up without one, as any download would
# fail. With a route it writes a stand-in instead of downloading, so a sandbox
# that wrongly has a network makes this task pass (the check reports it)
# without a packet leaving this machine.
python3 - <<'PY'
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    s.connect(("192.0.2.1", 9))
except OSError as e:
    sys.exit(f"no route to the internet: {e}")
open("/app/pip.html", "w").write("pip: a route out exists (not downloaded: tests send nothing off the machine)\n")
PY
