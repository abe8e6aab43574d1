"""python/verified_by.py: README.md's "Verified by" table against a run's results.

The real check runs last in python/run-tests.sh on the run's own results;
these tests feed it made-up results (pytest's JUnit XML) to show that it
accepts what the table says and refuses anything else.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

pytest.importorskip("k8s_agent_sandbox")

SCRIPT = REPO / "python" / "verified_by.py"


def _sdk_row_counts() -> tuple[int, int]:
    """(passed, expected failures) of the table's k8s-agent-sandbox row."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    row = next(line for line in text.splitlines() if line.startswith("| `k8s-agent-sandbox` SDK"))
    result = row.strip().strip("|").split("|")[2]
    passed = int(re.search(r"(\d+) passed", result).group(1))
    m = re.search(r"(\d+) expected failures?", result)
    return passed, int(m.group(1)) if m else 0


def _junit(path: Path, passed: int, xfailed: int) -> None:
    cases = [f'<testcase classname="python.tests.test_k8s_agent_sandbox" name="test_{i}" time="0"/>' for i in range(passed)]
    cases += [
        f'<testcase classname="python.tests.test_k8s_agent_sandbox" name="test_x{i}" time="0">'
        '<skipped type="pytest.xfail" message="expected"/></testcase>'
        for i in range(xfailed)
    ]
    path.write_text(f'<testsuites><testsuite name="pytest">{"".join(cases)}</testsuite></testsuites>')


def _check(results: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), str(results)], capture_output=True, text=True, timeout=60)


def test_the_tables_counts_are_accepted(tmp_path: Path) -> None:
    passed, xfailed = _sdk_row_counts()
    _junit(tmp_path / "pytest.xml", passed, xfailed)
    p = _check(tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "0 disagreements" in p.stdout
    # The suites without results here are said to be unchecked, not passed over in silence.
    assert "Harbor" in p.stdout and "did not run here" in p.stdout


def test_other_counts_are_refused(tmp_path: Path) -> None:
    passed, xfailed = _sdk_row_counts()
    _junit(tmp_path / "pytest.xml", passed - 1, xfailed + 1)
    p = _check(tmp_path)
    assert p.returncode == 1
    assert f"the table says passed {passed}, this run: {passed - 1}" in p.stdout


def test_harbor_counts_are_checked(tmp_path: Path) -> None:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    row = next(line for line in text.splitlines() if line.startswith("| Harbor oracle agent"))
    tasks = int(re.search(r"(\d+) tasks", row).group(1))
    (tmp_path / "harbor.json").write_text(
        f'{{"harbor_version": "0.25.0", "tasks": {tasks + 1}, "expected_pass": 4, "expected_fail": 4,'
        f' "as_expected": {tasks + 1}, "not_as_expected": 0}}'
    )
    p = _check(tmp_path)
    assert p.returncode == 1
    assert f"the table says tasks {tasks}, this run: {tasks + 1}" in p.stdout
