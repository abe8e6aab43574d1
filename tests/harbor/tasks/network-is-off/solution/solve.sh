#!/bin/bash
# Whether a route out exists, asked without sending a packet: connect() on a
# UDP socket only looks the route up (TEST-NET and documentation addresses).
python3 - <<'PY'
import socket
def routed(family, addr):
    s = socket.socket(family, socket.SOCK_DGRAM)
    try:
        s.connect((addr, 9))
        return True
    except OSError:
        return False
    finally:
        s.close()
state = "open" if routed(socket.AF_INET, "192.0.2.1") or routed(socket.AF_INET6, "2001:db8::1") else "blocked"
open("/app/network.txt", "w").write(state + "\n")
PY
