#!/bin/bash
# Whether anything but the allowlist can be reached, found without a packet
# leaving this machine: the route to the outside is looked up (a UDP
# connect() sends nothing), and the proxy is asked for a tunnel to a loopback
# address that is not on the list (refused by its policy; were it not, the
# connection would stay on this machine).
python3 - <<'PY'
import http.client, os, socket, urllib.parse
def routed():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.connect(("192.0.2.1", 9))
        return True
    except OSError:
        return False
    finally:
        s.close()
def proxy_tunnels():
    proxy = os.environ.get("HTTPS_PROXY") or os.environ.get("https_proxy")
    if not proxy:
        return True  # no proxy at all: nothing enforces the list
    u = urllib.parse.urlsplit(proxy)
    c = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=10)
    c.set_tunnel("127.0.0.1", 9)
    try:
        c.connect()
        return True
    except OSError:
        return False
    finally:
        c.close()
state = "open" if routed() or proxy_tunnels() else "blocked"
open("/app/egress.txt", "w").write(state + "\n")
PY
