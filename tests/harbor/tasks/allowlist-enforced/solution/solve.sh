#!/bin/bash
python3 - <<'PY'
import urllib.request
try:
    urllib.request.urlopen("https://example.com/", timeout=10).close()
    state = "open"
except OSError:
    state = "blocked"
open("/app/egress.txt", "w").write(state + "\n")
PY
