#!/bin/bash
python3 - <<'PY'
import urllib.request
with urllib.request.urlopen("https://pypi.org/simple/pip/", timeout=10) as r:
    open("/app/pip.html", "wb").write(r.read())
PY
