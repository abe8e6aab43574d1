"""``pip install ./python`` writes nothing into the checkout (newcomer audit 2026-12-03, L12).

setuptools left ``build/`` and ``src/deepbox.egg-info`` in the tree (and so
failed on a read-only checkout); the package builds with flit_core, which
writes only the wheel, outside the tree.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def test_pip_install_leaves_the_checkout_clean(tmp_path: Path) -> None:
    # A copy of the package's sources (what git tracks), so that leftovers of
    # an earlier install in the real checkout cannot hide new ones.
    src = tmp_path / "python"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / "python" / name, src / name)
    shutil.copytree(REPO / "python" / "src", src / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    before = _tree(src)
    target = tmp_path / "site"
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    p = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-compile", "--target", str(target), str(src)],
        capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL, env=env, cwd=tmp_path,
    )
    if p.returncode != 0 and ("Could not find a version" in p.stderr or "NewConnectionError" in p.stderr):
        pytest.skip(f"pip cannot fetch the build backend from PyPI: {p.stderr.strip().splitlines()[-1]}")
    assert p.returncode == 0, p.stderr[-3000:]
    assert _tree(src) == before, f"pip install wrote into the source tree: {sorted(_tree(src) - before)}"
    # And the wheel is complete: the package, its marker and the dcode entry point.
    assert (target / "deepbox" / "py.typed").is_file()
    dist = next(target.glob("deepbox-*.dist-info"))
    entry_points = (dist / "entry_points.txt").read_text().replace(" ", "")
    assert "[deepagents_code.sandbox_providers]\ndeepbox=deepbox.dcode:DeepboxProvider" in entry_points
