"""The package is versioned with the C++ project."""

from __future__ import annotations

import re
import tomllib

import deepbox
from conftest import REPO


def test_version_matches_cmake_project_version() -> None:
    cmake = (REPO / "CMakeLists.txt").read_text(encoding="utf-8")
    m = re.search(r"project\(\s*deepbox\s+VERSION\s+([0-9.]+)", cmake)
    assert m, "CMakeLists.txt has no project(deepbox VERSION ...)"
    assert deepbox.__version__ == m.group(1)
    pyproject = tomllib.loads((REPO / "python" / "pyproject.toml").read_text(encoding="utf-8"))
    assert pyproject["project"]["version"] == m.group(1)
