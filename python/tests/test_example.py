"""examples/python/main.py offline (scripted model): passes; a wrong script fails."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import REPO

pytest.importorskip("deepagents")
MAIN = REPO / "examples" / "python" / "main.py"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "ANTHROPIC_API_KEY"}
    return subprocess.run(
        [sys.executable, str(MAIN), "--ttl", "300", "--network", "none", *args],
        capture_output=True, text=True, env=env, timeout=600, stdin=subprocess.DEVNULL,
    )


def test_example_passes_offline(deepbox_bin: str) -> None:
    p = _run()
    assert p.returncode == 0, p.stderr
    assert p.stdout.rstrip().endswith(
        "Sandbox verification passed: fib.py runs in the sandbox and prints the expected sequence."
    )
    assert "scripted conversation, not a live model" in p.stderr
    assert "[tool] execute python3 /workspace/fib.py" in p.stderr
    sid = p.stderr.split("Claimed sandbox ", 1)[1].split()[0]
    assert f"Claimed sandbox {sid} (TTL 300 s, network none)" in p.stderr
    assert f"Deleted sandbox {sid}" in p.stderr
    ls = subprocess.run([deepbox_bin, "sandbox", "ls", "-q"], capture_output=True, text=True)
    assert sid not in ls.stdout


def test_example_fails_when_the_script_is_wrong(deepbox_bin: str) -> None:
    p = _run("--scripted", "wrong")
    assert p.returncode == 1
    assert "Sandbox verification FAILED" in p.stderr
    assert "Sandbox verification passed" not in p.stdout
    assert "Deleted sandbox" in p.stderr
